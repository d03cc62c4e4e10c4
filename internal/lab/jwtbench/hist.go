package jwtbench

import (
	"math"
	"sync/atomic"
	"time"
)

// histBase is the bucket growth: 2% wide buckets from 1 µs to about 1,000 s.
const (
	histBase    = 1.02
	histBuckets = 1100
)

// Hist records durations into logarithmic buckets, safe for concurrent use: quantiles
// are within 2% without keeping every sample.
type Hist struct {
	counts [histBuckets]atomic.Int64
	n      atomic.Int64
	sum    atomic.Int64 // nanoseconds
	max    atomic.Int64
}

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(math.Log(us)/math.Log(histBase))+1, histBuckets-1)
}

// upper is the upper edge of bucket i.
func upper(i int) time.Duration {
	return time.Duration(math.Pow(histBase, float64(i)) * float64(time.Microsecond))
}

// Record adds one duration.
func (h *Hist) Record(d time.Duration) {
	h.counts[bucketOf(d)].Add(1)
	h.n.Add(1)
	h.sum.Add(int64(d))
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// Quantile is the duration below which a fraction q of the samples lie (the bucket's
// upper edge, capped by the largest sample; the last bucket holds everything longer).
func (h *Hist) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i := range h.counts {
		if seen += h.counts[i].Load(); seen >= max(rank, 1) && i < histBuckets-1 {
			return min(upper(i), time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// Latency summarises a histogram in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary of the histogram.
func (h *Hist) Summary() Latency {
	n := h.n.Load()
	if n == 0 {
		return Latency{}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Latency{Count: n, Mean: ms(time.Duration(h.sum.Load() / n)), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(time.Duration(h.max.Load()))}
}
