package outagebench

import (
	"testing"
	"time"
)

// The summary's quantiles, the target and the connect counts, on readings made up so
// that each figure is known.
func TestSummarize(t *testing.T) {
	s := time.Second
	r := &Results{
		Options:      Options{Devices: 4, Down: 10 * s, Reps: 2, RecentMax: 4 * s},
		FirstConnect: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond},
		Reps: []Rep{
			{Rep: 1, Back: []time.Duration{s, 2 * s, 3 * s, 4 * s}, HubCPU: 400 * time.Millisecond,
				Attempts: []time.Duration{-10 * s, -9500 * time.Millisecond, -2 * s, s, 2 * s, 3 * s, 4 * s}},
			{Rep: 2, Back: []time.Duration{s, 11 * s, -1, 2 * s}},
		},
	}
	got := Summarize(r)
	if d := got.FirstConnect; d.P50 != 20 || d.P99 != 40 || d.Max != 40 || d.Missing != 0 {
		t.Fatalf("first connect %+v", d)
	}
	r1 := got.Reps[0]
	if r1.Back.P50 != 2000 || r1.Back.P90 != 4000 || r1.WithinTarget != 1 || r1.HubCPUPerDeviceMS != 100 {
		t.Fatalf("outage 1: %+v", r1)
	}
	// Three connects while down over 4 devices and 10 s; the busiest second is the
	// kill's (two), after the hub one per second. An even spread: 4 / (0.75 × 4 s).
	if r1.OutageAttemptsPerDeviceS != 3.0/4/10 || r1.PeakAttempts != 2 || r1.PeakAfterBack != 1 || r1.Bins[-10] != 2 || r1.Bins[-2] != 1 {
		t.Fatalf("outage 1 connects: %+v", r1)
	}
	if got.Options.EvenRatePer != 4.0/3 || r1.PeakOverEven != 1.5 {
		t.Fatalf("even spread %v, peak over it %v", got.Options.EvenRatePer, r1.PeakOverEven)
	}
	r2 := got.Reps[1]
	if r2.Back.Missing != 1 || r2.Back.Max != 11000 || r2.WithinTarget != 0.5 {
		t.Fatalf("outage 2: %+v", r2)
	}
	if got.Target.Met || got.Target.Missing != 1 || got.Target.WorstMaxMS != 11000 {
		t.Fatalf("target %+v: one device late and one missing is not met", got.Target)
	}
	r.Reps = r.Reps[:1]
	if tg := Summarize(r).Target; !tg.Met || tg.WorstMaxMS != 4000 {
		t.Fatalf("target %+v: every device within 10 s is met", tg)
	}
}
