package linkemu

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// IEEE 802.15.4 (2.4 GHz O-QPSK PHY) and 6LoWPAN constants. Sources: IEEE 802.15.4-2006
// §6.5.2 (250 kbit/s, 62.5 ksymbol/s, so one byte takes 32 µs), §6.3 (synchronisation header
// of 4 bytes preamble + 1 byte SFD, and a 1-byte PHY header), §7.2 (MAC frames),
// §7.4.2 (aTurnaroundTime, aUnitBackoffPeriod, aMaxSIFSFrameSize, macMinBE, macMaxBE,
// macMaxCSMABackoffs, macMaxFrameRetries, macAckWaitDuration); RFC 4944 §5.3
// (fragment headers, offsets in units of 8 bytes) and RFC 6282 (IPHC).
const (
	Rate802154     = 250_000 // bit/s
	byteTime802154 = 32 * time.Microsecond
	symbolTime     = 16 * time.Microsecond
	// MaxPSDU is the largest 802.15.4 frame (aMaxPHYPacketSize).
	MaxPSDU = 127
	// phyOverhead: preamble (4) + SFD (1) + PHY header (1), sent before every frame.
	phyOverhead = 6
	// macOverhead of a data frame: frame control (2) + sequence number (1) + destination
	// PAN (2) + 64-bit destination (8) + 64-bit source (8, PAN ID compressed) + FCS (2).
	macOverhead = 23
	// ackPSDU: frame control (2) + sequence number (1) + FCS (2).
	ackPSDU = 5
	// iphcHeader is the IPv6 header after RFC 6282 compression on this link: 2 bytes of
	// IPHC plus the next-header byte inline; addresses come from a shared context and the
	// link-layer addresses, traffic class and flow label are elided, hop limit 64 is coded.
	iphcHeader  = 3
	frag1Header = 4 // RFC 4944 FRAG1
	fragNHeader = 5 // RFC 4944 FRAGN
	ipv6Header  = 40

	turnaround      = 12 * symbolTime // aTurnaroundTime: rx/tx switch before the ACK
	unitBackoff     = 20 * symbolTime // aUnitBackoffPeriod
	cca             = 8 * symbolTime  // clear channel assessment
	sifs            = 12 * symbolTime // macSIFSPeriod, after frames of at most 18 bytes
	lifs            = 40 * symbolTime // macLIFSPeriod, after longer frames
	maxSIFSFrame    = 18              // aMaxSIFSFrameSize
	minBE           = 3               // macMinBE
	ackWait         = 54 * symbolTime // macAckWaitDuration: an ACK not here by then is lost
	maxFrameRetries = 3               // macMaxFrameRetries
)

// Frame is one link-layer frame of a packet.
type Frame struct {
	PSDU int // bytes of the frame (MAC header, payload, FCS)
}

// Fragment802154 splits an IPv6 packet of ipLen bytes into 802.15.4 frames with 6LoWPAN
// (IPHC, then FRAG1/FRAGN when it does not fit one frame). Fragment payloads are cut so
// that each fragment's uncompressed share is a multiple of 8 bytes, as RFC 4944 requires:
// with these headers every fragment carries 96 bytes of the IPv6 packet beyond its
// header, the "about 96 bytes per frame" of paper 000.
func Fragment802154(ipLen int) []Frame {
	if ipLen < ipv6Header {
		ipLen = ipv6Header
	}
	room := MaxPSDU - macOverhead
	compressed := ipLen - ipv6Header + iphcHeader
	if compressed <= room {
		return []Frame{{PSDU: macOverhead + compressed}}
	}
	// FRAG1: IPHC header + the first chunk; its uncompressed size (40 + chunk) is a
	// multiple of 8.
	first := (room-frag1Header-iphcHeader+ipv6Header)/8*8 - ipv6Header
	frames := []Frame{{PSDU: macOverhead + frag1Header + iphcHeader + first}}
	left := ipLen - ipv6Header - first
	per := (room - fragNHeader) / 8 * 8
	for left > 0 {
		n := min(per, left)
		frames = append(frames, Frame{PSDU: macOverhead + fragNHeader + n})
		left -= n
	}
	return frames
}

// FrameAirtime is the medium time of one 802.15.4 frame sent with unslotted CSMA/CA and
// acknowledged: the first backoff (random in 0..2^minBE-1 unit periods; rng nil takes
// the mean), CCA, the frame with its PHY overhead, turnaround, the ACK, and the
// interframe space.
func FrameAirtime(psdu int, rng *rand.Rand) time.Duration {
	backoff := time.Duration(3.5 * float64(unitBackoff))
	if rng != nil {
		backoff = time.Duration(rng.IntN(1<<minBE)) * unitBackoff
	}
	ifs := lifs
	if psdu <= maxSIFSFrame {
		ifs = sifs
	}
	return backoff + cca + time.Duration(phyOverhead+psdu)*byteTime802154 + turnaround +
		time.Duration(phyOverhead+ackPSDU)*byteTime802154 + ifs
}

// lostFrameAirtime is a transmission whose frame or ACK got lost: the sender waits
// macAckWaitDuration, then retries.
func lostFrameAirtime(psdu int, rng *rand.Rand) time.Duration {
	backoff := time.Duration(3.5 * float64(unitBackoff))
	if rng != nil {
		backoff = time.Duration(rng.IntN(1<<minBE)) * unitBackoff
	}
	return backoff + cca + time.Duration(phyOverhead+psdu)*byteTime802154 + ackWait
}

// Profile is a link technology.
type Profile struct {
	Name string
	// Rate in bit/s of the medium (serialisation); Delay and Jitter are one-way extras.
	Rate   int64
	Delay  time.Duration
	Jitter time.Duration
	// Loss is the probability that one frame (802.15.4) or packet (others) is lost.
	Loss float64
	// HalfDuplex: both directions share one medium.
	HalfDuplex bool
	MTU        int
	// Is802154 selects the frame model above instead of plain serialisation.
	Is802154 bool
}

// Profiles are the links the lab offers. 802.15.4 follows the standard (constants above);
// the others are representative figures for the MQTT and TLS benchmarks, not
// measurements: Wi-Fi 2.4 GHz as an 802.11n 20 MHz single stream at a typical 65 Mbit/s
// PHY rate, ~30 Mbit/s of goodput after contention, a few ms of latency; 4G/LTE as a
// mid-cell uplink of 10 Mbit/s with 25 ms one-way latency and jitter; Ethernet as 1 Gbit/s.
var Profiles = map[string]Profile{
	"802154":   {Name: "802154", Rate: Rate802154, Is802154: true, HalfDuplex: true, MTU: 1280},
	"wifi":     {Name: "wifi", Rate: 30_000_000, Delay: 2 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.001, HalfDuplex: true, MTU: 1500},
	"lte":      {Name: "lte", Rate: 10_000_000, Delay: 25 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.001, MTU: 1500},
	"ethernet": {Name: "ethernet", Rate: 1_000_000_000, Delay: 50 * time.Microsecond, MTU: 1500},
}

// Lookup returns a profile by name with a clear error.
func Lookup(name string) (Profile, error) {
	p, ok := Profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("linkemu: unknown link %q: use 802154, wifi, lte or ethernet", name)
	}
	return p, nil
}

// Cost is what sending one packet takes on the medium.
type Cost struct {
	Airtime   time.Duration // medium busy time
	LinkBytes int           // bytes on the air, PHY overhead included, retransmissions too
	Frames    int           // frames sent, retransmissions included (ACKs not counted)
	Lost      bool          // the link gave up (after maxFrameRetries for 802.15.4)
}

// Send computes the cost of one IP packet of n bytes. rng draws backoffs and losses;
// nil means mean backoff and no loss (the model's ideal).
func (p Profile) Send(n int, rng *rand.Rand) Cost {
	var c Cost
	if !p.Is802154 {
		c.Airtime = time.Duration(float64(n*8) / float64(p.Rate) * float64(time.Second))
		c.LinkBytes, c.Frames = n, 1
		c.Lost = rng != nil && rng.Float64() < p.Loss
		return c
	}
	for _, f := range Fragment802154(n) {
		sent := false
		for try := 0; try <= maxFrameRetries; try++ {
			c.Frames++
			c.LinkBytes += phyOverhead + f.PSDU
			if rng != nil && rng.Float64() < p.Loss {
				c.Airtime += lostFrameAirtime(f.PSDU, rng)
				continue
			}
			c.Airtime += FrameAirtime(f.PSDU, rng)
			c.LinkBytes += phyOverhead + ackPSDU
			sent = true
			break
		}
		if !sent {
			c.Lost = true // 6LoWPAN cannot reassemble without this fragment
			return c
		}
	}
	return c
}

// MaxGoodput is the model's ideal one-way TCP goodput in bit/s with full-size segments
// of mss bytes (IPv6 + TCP headers of 60 bytes with timestamps), counting the reverse
// ACK packet every two segments on a half-duplex medium.
func (p Profile) MaxGoodput(mss int) float64 {
	seg := p.Send(mss+60, nil).Airtime
	ack := p.Send(60, nil).Airtime
	per := 2*seg + ack
	if !p.HalfDuplex {
		per = 2 * seg
	}
	return float64(2*mss*8) / per.Seconds()
}
