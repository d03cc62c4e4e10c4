package linkemu

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Airtime of known packets, computed by hand from the constants' sources.
func TestAirtimeOfKnownPackets(t *testing.T) {
	// A full 1280-byte IPv6 packet: FRAG1 of 126 bytes (23 MAC + 4 FRAG1 + 3 IPHC + 96),
	// eleven FRAGN of 124 (23 + 5 + 96) and a last FRAGN of 116 (23 + 5 + 88): 13 frames.
	f := Fragment802154(1280)
	if len(f) != 13 || f[0].PSDU != 126 || f[1].PSDU != 124 || f[11].PSDU != 124 || f[12].PSDU != 116 {
		t.Fatalf("1280 bytes: %+v", f)
	}
	for _, fr := range f {
		if fr.PSDU > MaxPSDU {
			t.Fatalf("frame of %d bytes exceeds 127", fr.PSDU)
		}
	}
	// A 124-byte frame: mean backoff 3.5 x 320 µs = 1120, CCA 128, (6 + 124) x 32 = 4160,
	// turnaround 192, ACK (6 + 5) x 32 = 352, LIFS 640: 6592 µs.
	if got := FrameAirtime(124, nil); got != 6592*time.Microsecond {
		t.Fatalf("124-byte frame: %v", got)
	}
	// A bare TCP ACK (60-byte IPv6 packet) fits one frame of 23 + 23 = 46 bytes:
	// 1120 + 128 + 52 x 32 + 192 + 352 + 640 = 4096 µs.
	if f := Fragment802154(60); len(f) != 1 || f[0].PSDU != 46 {
		t.Fatalf("60 bytes: %+v", f)
	}
	p := Profiles["802154"]
	if c := p.Send(60, nil); c.Airtime != 4096*time.Microsecond || c.LinkBytes != 52+11 || c.Frames != 1 {
		t.Fatalf("60-byte packet: %+v", c)
	}
	// The largest unfragmented packet is 141 bytes (104 bytes of MAC payload).
	if len(Fragment802154(141)) != 1 || len(Fragment802154(142)) != 2 {
		t.Fatal("the fragmentation threshold moved")
	}
}

func TestLossAndRetries(t *testing.T) {
	p := Profiles["802154"]
	p.Loss = 1
	c := p.Send(100, rand.New(rand.NewPCG(1, 2)))
	if !c.Lost || c.Frames != 1+maxFrameRetries {
		t.Fatalf("always lost: %+v", c)
	}
	p.Loss = 0
	if c := p.Send(1280, rand.New(rand.NewPCG(1, 2))); c.Lost || c.Frames != 13 {
		t.Fatalf("never lost: %+v", c)
	}
}

// The model's ceiling for bulk TCP over 802.15.4 is a few tens of kbit/s, far below the
// 250 kbit/s raw rate: per-frame costs dominate, as the paper's efficiency figures show.
func TestMaxGoodput(t *testing.T) {
	g := Profiles["802154"].MaxGoodput(1220)
	if g < 50_000 || g > 150_000 {
		t.Fatalf("802.15.4 ceiling %.0f bit/s", g)
	}
	if e := Profiles["ethernet"].MaxGoodput(1440); e < 9e8 {
		t.Fatalf("ethernet ceiling %.0f bit/s", e)
	}
}
