// Package sshtest gives tests fresh SSH keys, so each test package does not carry its own
// copy of the same few lines.
package sshtest
