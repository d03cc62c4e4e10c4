package sshext

const (
	// CompressChannel is the channel an agent opens to ask for compression (agent
	// --compress, profile compression: true). It carries every forwarded connection of
	// the session as a stream of package zmux.
	CompressChannel = "zmux@iotsafe.dev"
	// CoalesceRequest is the global request an agent with --coalesce sends so that the
	// hub lets TCP merge its small packets towards the device too (Nagle).
	CoalesceRequest = "coalesce@iotsafe.dev"
)
