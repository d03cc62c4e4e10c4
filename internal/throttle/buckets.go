package throttle

import (
	"math"
	"sync"
	"time"
)

// Buckets are token buckets by key (a device, an account): each refills at Rate tokens
// a second up to Burst. A key whose bucket is full again is forgotten, so idle keys cost
// nothing. The zero value is not usable: use NewBuckets.
type Buckets struct {
	rate, burst float64

	mu    sync.Mutex
	keys  map[string]*bucket
	swept time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

// NewBuckets makes buckets of rate tokens a second, holding burst at most.
func NewBuckets(rate, burst float64) *Buckets {
	return &Buckets{rate: rate, burst: burst, keys: map[string]*bucket{}}
}

// Take spends n tokens of key's bucket; when they are not there it spends nothing and
// says how long until they are (at least a second).
func (b *Buckets) Take(key string, n float64, now time.Time) (wait time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	k := b.keys[key]
	if k == nil {
		k = &bucket{tokens: b.burst, at: now}
		b.keys[key] = k
	}
	k.tokens = math.Min(b.burst, k.tokens+now.Sub(k.at).Seconds()*b.rate)
	k.at = now
	if n > k.tokens {
		return max(time.Second, time.Duration((n-k.tokens)/b.rate*float64(time.Second))), false
	}
	k.tokens -= n
	return 0, true
}

// Refund gives back n tokens Take spent (the request was refused for another reason).
func (b *Buckets) Refund(key string, n float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.keys[key]; k != nil {
		k.tokens = math.Min(b.burst, k.tokens+n)
	}
}

// sweep forgets, once a minute, the buckets that are full again.
func (b *Buckets) sweep(now time.Time) {
	if now.Sub(b.swept) < time.Minute {
		return
	}
	b.swept = now
	for key, k := range b.keys {
		if k.tokens+now.Sub(k.at).Seconds()*b.rate >= b.burst {
			delete(b.keys, key)
		}
	}
}
