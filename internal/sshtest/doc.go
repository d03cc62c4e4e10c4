// Package sshtest gives tests fresh SSH keys and a server that answers nothing after its
// handshake, so each test package does not carry its own copy of the same few lines.
package sshtest
