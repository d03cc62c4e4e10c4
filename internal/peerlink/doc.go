// Package peerlink is a hub's side of the links to the other hubs of a shared registry:
// one SSH connection per peer hub, made on first use and kept, authenticated by this
// hub's host key as user "hub:NAME" and pinning the peer's host key, both as published
// in the registry. Each connection to a device whose session a peer holds is one
// peer@iotsafe.dev channel on it.
package peerlink
