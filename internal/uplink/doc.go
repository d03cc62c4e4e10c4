// Package uplink is the gateway side of the three-level scheme (paper 000): a hub with
// an upstream keeps one SSH session to a central hub with its gateway key, announces on
// it every device that serves an alias here, and carries the centre's connections to
// them. The centre treats each announced device as one of its own (package sshd,
// server_gateway.go); local devices keep working while the centre is unreachable.
package uplink
