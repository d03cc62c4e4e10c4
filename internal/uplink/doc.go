// Package uplink is the home of the gateway tier of the three-level scheme (paper 000):
// a hub with an upstream (the gateway) keeps one SSH session to a central hub with its
// gateway key, and the centre treats each device the gateway announces as one of its
// own; local devices keep working while the centre is unreachable.
//
// The tier's steps, and where each one is:
//
//  1. session: the gateway dials the centre and authenticates with its gateway key
//     (Uplink.Run, session; the centre: sshd's authentication, registry gateway keys).
//  2. announce: the gateway names every device that serves an alias here
//     (Uplink.sync, answered); the centre claims each name for this gateway
//     (sshd server_gateway.go: announce, claimRefusal; registry/gateways.go:
//     ClaimDevices) and serves it as a child session.
//  3. carry: the centre's connections to an announced device's aliases come down the
//     session (sshd server_relay.go: RelayTo) and the gateway serves them
//     (Uplink.serveChannels, serveMux).
//  4. relay: with a telemetry path at the gateway, its devices' notifications go to the
//     centre's store in id order from where the centre's store is (relay.go: relayRun's
//     handshake, send, refusals, persist; the wire: sshext/gateway.go and telemetry.go);
//     the centre stores each batch once per gateway store and id (Centre, called by
//     sshd server_telemetry.go).
//  5. withdraw: a device the gateway stops serving, or the centre revokes, is withdrawn
//     on both sides (Uplink.revoked, Changed; sshd withdraw, tellGateway).
//
// The hub wires the gateway side in hub/upstream.go and the centre side in
// hub/components.go (startSSH).
package uplink
