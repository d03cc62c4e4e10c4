// Package e2e holds end-to-end tests: they build the real iotsafe binary and drive it
// with real peers (OpenSSH ssh, Dropbear dbclient, curl) over loopback.
package e2e
