// Package kexinit reads what an SSH peer offers in its first key-exchange message
// (SSH_MSG_KEXINIT, RFC 4253 section 7.1), sent in the clear after the identification
// line: the scanner reads a server's (internal/scan), and the hub records each device
// client's (Recorder) so the console can say which devices a change of the hub's crypto
// policy would lock out. The input is untrusted: every length is checked.
package kexinit
