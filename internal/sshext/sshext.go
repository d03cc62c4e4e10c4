package sshext

import "time"

const (
	// MuxChannel is the channel an agent opens to carry every forwarded connection of
	// the session as a stream of package zmux (the agent's default, and --compress). Its
	// extra data is a MuxOpen.
	MuxChannel = "zmux@iotsafe.dev"
	// CoalesceRequest is the global request an agent with --coalesce sends so that the
	// hub lets TCP merge its small packets towards the device too (Nagle).
	CoalesceRequest = "coalesce@iotsafe.dev"
)

// Modes of the multiplexed channel.
const (
	// MuxDeflate compresses the channel with one deflate context per direction; the
	// device's profile must allow compression.
	MuxDeflate = "deflate"
	// MuxPlain only multiplexes.
	MuxPlain = "none"
)

// MuxOpen is the extra data of a MuxChannel open (SSH wire encoding).
type MuxOpen struct {
	Mode string
	// Coalesce asks both ends to hold small batches briefly so they leave in fewer
	// packets (agent --coalesce).
	Coalesce bool
}

// CoalesceDelay is how long a multiplexed channel with Coalesce holds a small batch.
const CoalesceDelay = 2 * time.Millisecond
