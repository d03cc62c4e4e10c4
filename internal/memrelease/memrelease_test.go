package memrelease

import (
	"testing"
	"time"
)

// steps feeds the watcher one reading a second, each allocating the given bytes, and
// returns the seconds (1-based) at which it released.
func steps(w *Watcher, t0 time.Time, allocs ...uint64) []int {
	var at []int
	total := uint64(0)
	w.Step(t0, total)
	for i, a := range allocs {
		total += a
		if w.Step(t0.Add(time.Duration(i+1)*time.Second), total) {
			at = append(at, i+1)
		}
	}
	return at
}

func TestReleasesOnceQuietAfterABurst(t *testing.T) {
	n := 0
	w := New(func() { n++ })
	// A burst of 40 MiB over two seconds, then quiet: released on the third quiet second.
	got := steps(w, time.Unix(0, 0), 20<<20, 20<<20, 1000, 1000, 1000, 1000, 1000)
	if len(got) != 1 || got[0] != 5 || n != 1 {
		t.Fatalf("released at %v (%d calls), want once at second 5", got, n)
	}
}

// A large idle hub allocates more than QuietRate on its own (its broker walks every
// client each second): quiet is judged against the burst.
func TestQuietRelativeToTheBurst(t *testing.T) {
	n := 0
	w := New(func() { n++ })
	bg := uint64(3 << 20)
	got := steps(w, time.Unix(0, 0), bg, bg, 100<<20, 100<<20, bg, bg, bg, bg)
	if len(got) != 1 || got[0] != 7 {
		t.Fatalf("released at %v, want once at second 7", got)
	}
}

func TestNeverWhileBusy(t *testing.T) {
	w := New(func() { t.Fatal("released while busy") })
	var busy []uint64
	for range 120 {
		busy = append(busy, 2<<20) // 2 MiB/s: above the quiet rate
	}
	steps(w, time.Unix(0, 0), busy...)
}

func TestNotWithoutABurst(t *testing.T) {
	w := New(func() { t.Fatal("released without a burst") })
	var idle []uint64
	for range 600 {
		idle = append(idle, 512<<10) // a fleet's keepalives: under the quiet rate
	}
	steps(w, time.Unix(0, 0), idle...) // 300 MiB in all, never a busy second
}

func TestSpacing(t *testing.T) {
	w := New(nil)
	w.release = func() {}
	burst := func() []uint64 { return []uint64{40 << 20, 0, 0, 0} }
	var seq []uint64
	for range 10 {
		seq = append(seq, burst()...) // a burst every 4 s
	}
	got := steps(w, time.Unix(0, 0), seq...)
	for i := 1; i < len(got); i++ {
		if got[i]-got[i-1] < int(Spacing/time.Second) {
			t.Fatalf("releases %d s apart, want at least %v", got[i]-got[i-1], Spacing)
		}
	}
	if len(got) == 0 {
		t.Fatal("never released")
	}
}

func TestConfigDefaultsOn(t *testing.T) {
	off := false
	if !(Config{}).On() || (Config{ReleaseWhenQuiet: &off}).On() {
		t.Fatal("release_when_quiet: unset must mean on, false off")
	}
}
