package jwtbench

import (
	"math"
	"testing"
)

func row(tr, alg string, n int, complete, incomplete int64, mean, sched float64) Row {
	return Row{Transport: tr, Alg: alg, Devices: n, Rep: 1,
		Sim: SimResult{Window: 1, Complete: complete, Incomplete: incomplete, Client: Latency{Mean: mean, P99: mean}, Scheduled: Latency{P99: sched}}}
}

// Closed loop: the sweep stops two points after throughput stops rising by 5%, and the
// knee is where the plateau starts (within 5% of the best); table 3 compares each algorithm with none at the knee and
// around it.
func TestClosedLoopKnee(t *testing.T) {
	var rows []Row
	for _, p := range []struct {
		n    int
		thr  int64
		mean float64
	}{{160, 4000, 10}, {320, 7000, 10}, {640, 9000, 10}, {1280, 9100, 10}, {2560, 8000, 40}} {
		rows = append(rows, row(HTTPS, "none", p.n, p.thr, 0, p.mean, 0), row(HTTPS, "HS512", p.n, p.thr-10, 0, p.mean*1.02, 0))
		if past := pastKnee(rows, HTTPS, 0); past != (p.n == 2560) {
			t.Fatalf("N=%d: past the knee %v", p.n, past)
		}
	}
	s := Summarize(&Results{Rows: rows}, Options{Algs: []string{"none", "HS512"}})
	k := s.Knees[HTTPS]
	if k.Devices != 640 || !(k.Throughput > 8900) || !k.Beyond {
		t.Fatalf("knee %+v: want 640 (9000/s, within 5%% of the best 9100/s), passed", k)
	}
	if math.Abs(s.Targets.HS512VsNone-2) > 1e-9 || s.Targets.KneeDevices != 640 {
		t.Fatalf("targets %+v", s.Targets)
	}
	if len(s.Table3) != 3 || s.Table3[0].Load != "before the knee" || s.Table3[0].Devices != 320 || s.Table3[2].Devices != 1280 {
		t.Fatalf("table 3: %+v", s.Table3)
	}
	// Incomplete requests past 1% end a closed-loop sweep at once.
	rows = append(rows[:2], row(HTTPS, "none", 320, 7000, 100, 10, 0))
	if !pastKnee(rows, HTTPS, 0) {
		t.Fatal("2% incomplete should end the sweep")
	}
}

// Rate mode: a point that failed a request, fell short of the offered rate or had a p99
// over 100 ms ends the sweep; the knee is the last point that met all three.
func TestRateModeKnee(t *testing.T) {
	rows := []Row{row(HTTPS, "HS256", 1000, 1000, 0, 5, 20), row(HTTPS, "HS256", 2000, 2000, 0, 5, 60)}
	if pastKnee(rows, HTTPS, 1) {
		t.Fatal("every point met the targets")
	}
	for _, bad := range []Row{row(HTTPS, "HS256", 4000, 3990, 10, 5, 50), row(HTTPS, "HS256", 4000, 3000, 0, 5, 50), row(HTTPS, "HS256", 4000, 4000, 0, 5, 150)} {
		if !pastKnee(append(rows, bad), HTTPS, 1) {
			t.Fatalf("%+v should end the sweep", bad.Sim)
		}
		s := Summarize(&Results{Rows: append(rows, bad), Rate: 1}, Options{Rate: 1, Algs: []string{"HS256"}})
		if s.Targets.RateDevices != 2000 || s.Targets.RateP99 != 60 || !s.Knees[HTTPS].Beyond {
			t.Fatalf("targets %+v knee %+v", s.Targets, s.Knees[HTTPS])
		}
	}
}

// A rate run where no N met the targets still fills the tables (at the smallest N) and
// says how far off it was.
func TestRateModeNothingMet(t *testing.T) {
	rows := []Row{row(HTTPS, "HS256", 4000, 4000, 0, 5, 300), row(HTTPS, "HS256", 8000, 8000, 0, 5, 900)}
	s := Summarize(&Results{Rows: rows, Rate: 1}, Options{Rate: 1, Algs: []string{"HS256"}})
	if s.Targets.RateDevices != 0 || s.Targets.RateP99 != 300 || len(s.Table1) != 1 {
		t.Fatalf("targets %+v, table 1 %+v", s.Targets, s.Table1)
	}
}

// The store's busy share is its writer's transaction time over the measured window,
// the median over repetitions.
func TestStoreBusyShare(t *testing.T) {
	var rows []Row
	for i, commit := range []float64{15, 24, 21} {
		r := row(HTTPS, "HS256", 12800, 384000, 0, 5, 50)
		r.Rep, r.Sim.Window, r.Hub.CommitSum = i+1, 30, commit
		rows = append(rows, r)
	}
	if p := Points(rows); len(p) != 1 || math.Abs(p[0].StoreBusyPct-70) > 1e-9 {
		t.Fatalf("points %+v: want the store busy 70%% of the window (21 s of 30, the median)", p)
	}
}
