package mqttload

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5}
	for q, want := range map[float64]float64{0: 1, 0.5: 3, 1: 5, 0.25: 2, 0.05: 1.2, 0.95: 4.8} {
		if got := Percentile(v, q); math.Abs(got-want) > 1e-9 {
			t.Errorf("Percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if Percentile(nil, 0.5) != 0 || Percentile([]float64{7}, 0.95) != 7 {
		t.Error("empty or single-value input")
	}
}

// The totals are mqtt-benchmark's: extremes over clients, mean and deviation of the
// clients' means, mean and sum of their bandwidths; a client that never connected counts
// in the ratio only.
func TestTotalsAsMQTTBenchmark(t *testing.T) {
	rs := []ClientResult{
		{Successes: 2, RunTime: 1, MsgTimeMin: 1, MsgTimeMax: 3, MsgTimeMean: 2, MsgsPerSec: 2, ConnectMs: 10},
		{Successes: 2, RunTime: 2, MsgTimeMin: 2, MsgTimeMax: 6, MsgTimeMean: 4, MsgsPerSec: 1, ConnectMs: 20},
		{Failures: 2, RunTime: 0.5},
	}
	tt := totals(rs, [][]float64{{1, 3}, {2, 6}, nil}, 0)
	if tt.Successes != 4 || tt.Failures != 2 || math.Abs(tt.Ratio-4.0/6) > 1e-9 {
		t.Errorf("counts %+v", tt)
	}
	if tt.MsgTimeMin != 1 || tt.MsgTimeMax != 6 || tt.MsgTimeMeanAvg != 3 || math.Abs(tt.MsgTimeMeanStd-math.Sqrt2) > 1e-9 {
		t.Errorf("message times %+v", tt)
	}
	if tt.AvgMsgsPerSec != 1.5 || tt.TotalMsgsPerSec != 3 || tt.ConnectMeanMs != 15 || math.Abs(tt.AvgRunTime-3.5/3) > 1e-9 {
		t.Errorf("bandwidth and runtimes %+v", tt)
	}
	if tt.P[2] != 2.5 {
		t.Errorf("median of every message %v", tt.P)
	}
}
