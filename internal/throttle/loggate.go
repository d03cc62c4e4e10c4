package throttle

import (
	"sync"
	"time"
)

// LogGate lets a log line through once per interval per key and counts what it held
// back, so a flood is reported as "N more" instead of N lines.
type LogGate struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*gateEntry
}

type gateEntry struct {
	last       time.Time
	suppressed int
}

// maxGateKeys bounds the memory of a gate; past it, the oldest-looking entries go.
const maxGateKeys = 4096

// NewLogGate lets one line per key through every interval.
func NewLogGate(every time.Duration) *LogGate {
	return &LogGate{every: every, now: time.Now, keys: map[string]*gateEntry{}}
}

// Allow reports whether a line for key may be logged now, and how many lines for key were
// held back since the last one that was.
func (g *LogGate) Allow(key string) (ok bool, suppressed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	e, found := g.keys[key]
	if !found {
		if len(g.keys) >= maxGateKeys {
			for k, old := range g.keys {
				if now.Sub(old.last) >= g.every {
					delete(g.keys, k)
				}
			}
			if len(g.keys) >= maxGateKeys {
				return false, 0 // still full of live keys: drop the line
			}
		}
		g.keys[key] = &gateEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < g.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}
