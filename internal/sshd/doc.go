// Package sshd is the hub's SSH server for devices: device-key authentication against
// the registry, reverse (tcpip-forward) and direct (direct-tcpip) forwards bounded by
// each device's profile, keepalives, session takeover and violation handling.
package sshd
