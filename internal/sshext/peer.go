package sshext

// Hubs sharing a registry reach each other's devices over SSH: a hub connects to the
// hub holding a device's session as user PeerUserPrefix+its own name, authenticated by
// its host key, which the peer checks against the key the hub published in the
// registry (and the other way round: each pins the other's host key from there).
const (
	// PeerUserPrefix starts the SSH user name of a peer hub ("hub:edge-b"); device
	// names cannot contain ':', so no device can pass for a hub.
	PeerUserPrefix = "hub:"
	// PeerChannel (hub to peer hub): one connection to a device's alias whose session
	// the peer holds. Extra data: DeviceOpen, its origin the process that connected at
	// the asking hub.
	PeerChannel = "peer@iotsafe.dev"
)
