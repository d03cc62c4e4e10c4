package jwtbench

import (
	"testing"
	"time"
)

// Quantiles come out within the buckets' 2% of the true ones, and never above the
// largest sample.
func TestHistQuantiles(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := h.Quantile(c.q)
		if got < c.want || float64(got) > float64(c.want)*1.021 {
			t.Errorf("q%.2f = %v, want %v within 2%%", c.q, got, c.want)
		}
	}
	if got := h.Quantile(1); got != time.Second {
		t.Errorf("max quantile %v, want the largest sample", got)
	}
	s := h.Summary()
	if s.Count != 1000 || s.Mean < 500 || s.Mean > 501 || s.Max != 1000 {
		t.Errorf("summary %+v", s)
	}
	var empty Hist
	if empty.Quantile(0.5) != 0 || empty.Summary().Count != 0 {
		t.Error("an empty histogram has no quantiles")
	}
	var tiny Hist
	tiny.Record(0)
	tiny.Record(time.Hour * 1000)
	if tiny.Quantile(0.5) > time.Microsecond || tiny.Quantile(1) != time.Hour*1000 {
		t.Errorf("extremes: %v %v", tiny.Quantile(0.5), tiny.Quantile(1))
	}
}
