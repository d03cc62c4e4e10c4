package authn

import (
	"sync"
	"time"
)

// failLimiter counts failed logins per key (client address, account) in fixed windows.
type failLimiter struct {
	max    int
	window time.Duration
	mu     sync.Mutex
	m      map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

// maxFailKeys bounds the limiter's memory: past it, expired windows are swept.
const maxFailKeys = 100000

func newFailLimiter(max int, window time.Duration) *failLimiter {
	return &failLimiter{max: max, window: window, m: map[string]*failWindow{}}
}

func (l *failLimiter) blocked(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[key]
	return w != nil && time.Since(w.start) < l.window && w.n >= l.max
}

func (l *failLimiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[key]
	if w == nil || time.Since(w.start) >= l.window {
		if len(l.m) > maxFailKeys {
			for k, v := range l.m {
				if time.Since(v.start) >= l.window {
					delete(l.m, k)
				}
			}
		}
		w = &failWindow{start: time.Now()}
		l.m[key] = w
	}
	w.n++
}
