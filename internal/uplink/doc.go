// Package uplink is the gateway side of the three-level scheme (paper 000): a hub with
// an upstream keeps one SSH session to a central hub with its gateway key, announces on
// it every device that serves an alias here, and carries the centre's connections to
// them. The centre treats each announced device as one of its own (package sshd,
// server_gateway.go); local devices keep working while the centre is unreachable.
//
// With a telemetry path at the gateway, the uplink also relays the notifications its
// devices store there to the centre's store (relay.go), in id order and from where the
// centre's store is, so the centre keeps every device's data and stores each once.
package uplink
