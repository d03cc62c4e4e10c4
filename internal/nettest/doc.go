// Package nettest gives tests a real loopback TCP connection, so each test package does
// not carry its own copy of the same few lines.
package nettest
