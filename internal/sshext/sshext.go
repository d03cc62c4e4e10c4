package sshext

import (
	"strings"
	"time"
)

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
	// MuxV2 appended to a mode ("none/2") asks for version 2 of zmux's framing: each side
	// first announces its receive window per stream (2 MiB by default instead of 256 KiB,
	// which halved bulk transfers). Hubs that predate it refuse the open as an unknown
	// mode, and the agent then opens the mode alone.
	MuxV2 = "/2"
)

// MuxMode splits a requested mode into its base (MuxDeflate, MuxPlain) and whether it
// asks for version 2.
func MuxMode(mode string) (base string, v2 bool) {
	if b, ok := strings.CutSuffix(mode, MuxV2); ok {
		return b, true
	}
	return mode, false
}

// MuxOpen is the extra data of a MuxChannel open (SSH wire encoding).
type MuxOpen struct {
	Mode string
	// Coalesce asks both ends to hold small batches briefly so they leave in fewer
	// packets (agent --coalesce).
	Coalesce bool
}

// CoalesceDelay is how long a multiplexed channel with Coalesce holds a small batch.
const CoalesceDelay = 2 * time.Millisecond
