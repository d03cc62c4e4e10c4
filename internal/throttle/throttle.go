package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"
)

// ErrQueueFull means the source already has as many connections waiting as allowed.
var ErrQueueFull = errors.New("throttle: too many connections waiting from this source")

// Config of the per-source limits. The zero value works: see the defaults per field.
type Config struct {
	// Startups is how many handshakes one source may have in progress at once; a failed
	// handshake keeps holding its startup until it is forgiven (see FailureRate). More
	// connections wait. 0 means 16.
	Startups int `yaml:"startups"`
	// FailureRate is how many failed handshakes per second are forgiven; it is the
	// sustained rate of handshakes a source that never succeeds gets. 0 means 5.
	FailureRate float64 `yaml:"failure_rate"`
	// Queue bounds the connections of one source waiting for a startup; more are
	// dropped at once. 0 means 1024.
	Queue int `yaml:"queue"`
	// QueueTotal bounds the waiting connections of all sources together (each holds a
	// descriptor); 0 means 4096.
	QueueTotal int `yaml:"queue_total"`
	// MaxWait is how long a connection waits for its turn before it is dropped; 0 means
	// 10s: less than a client's own handshake timeout (the agent's is 15 s), so a client
	// still waiting is still there when its turn comes (a fleet of a thousand devices
	// behind one address gets in well within it).
	MaxWait time.Duration `yaml:"max_wait"`
	// IPv4Prefix and IPv6Prefix group addresses into one source (as OpenSSH's
	// PerSourceNetBlockSize); 0 means 32 and 64.
	IPv4Prefix int `yaml:"ipv4_prefix"`
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults() {
	if c.Startups == 0 {
		c.Startups = 16
	}
	if c.FailureRate == 0 {
		c.FailureRate = 5
	}
	if c.Queue == 0 {
		c.Queue = 1024
	}
	if c.QueueTotal == 0 {
		c.QueueTotal = 4096
	}
	if c.MaxWait == 0 {
		c.MaxWait = 10 * time.Second
	}
	if c.IPv4Prefix == 0 {
		c.IPv4Prefix = 32
	}
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = 64
	}
}

// Validate checks the configuration after defaults; field names are given relative to
// the section the caller embeds Config in.
func (c *Config) Validate(section string) error {
	switch {
	case c.Startups < 1:
		return fmt.Errorf("throttle: %s.startups: must be at least 1", section)
	case c.FailureRate <= 0 || math.IsInf(c.FailureRate, 0) || math.IsNaN(c.FailureRate):
		return fmt.Errorf("throttle: %s.failure_rate: must be a positive number", section)
	case c.MaxWait < 0:
		return fmt.Errorf("throttle: %s.max_wait: must not be negative", section)
	case c.Queue < 0 || c.QueueTotal < 0:
		return fmt.Errorf("throttle: %s.queue and queue_total: must not be negative", section)
	case c.IPv4Prefix < 8 || c.IPv4Prefix > 32:
		return fmt.Errorf("throttle: %s.ipv4_prefix: want 8-32", section)
	case c.IPv6Prefix < 16 || c.IPv6Prefix > 128:
		return fmt.Errorf("throttle: %s.ipv6_prefix: want 16-128", section)
	}
	return nil
}

// Limiter tracks every source that has something in progress or failures not yet
// forgiven. It is safe for concurrent use.
type Limiter struct {
	cfg    Config
	now    func() time.Time
	queued func() // tests: called when a connection starts waiting

	mu      sync.Mutex
	sources map[netip.Prefix]*source
	calls   int // Acquire calls since the last sweep of idle sources
	waiting int // connections waiting, all sources
}

type source struct {
	inflight int
	waiting  int
	debt     float64   // failures not yet forgiven, at most Startups
	at       time.Time // when debt was last decayed
	wake     chan struct{}
}

// New builds a limiter; cfg must have had ApplyDefaults and Validate.
func New(cfg Config) *Limiter {
	return &Limiter{cfg: cfg, now: time.Now, sources: map[netip.Prefix]*source{}}
}

// Source is the prefix an address is counted under.
func (l *Limiter) Source(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := l.cfg.IPv6Prefix
	if a.Is4() {
		bits = l.cfg.IPv4Prefix
	}
	p, _ := a.Prefix(bits)
	return p
}

// Ticket is one admitted handshake. Call Done when it ends; only the first call counts.
type Ticket struct {
	l      *Limiter
	key    netip.Prefix
	once   sync.Once
	Waited bool // the connection had to wait for its turn
}

// Acquire admits a handshake from a, waiting while the source is at its limit, until ctx
// ends or MaxWait passes (the context's error is returned), or at once when the source's
// queue is full (ErrQueueFull).
func (l *Limiter) Acquire(ctx context.Context, a netip.Addr) (*Ticket, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.MaxWait)
	defer cancel()
	key := l.Source(a)
	t := &Ticket{l: l, key: key}
	queued := false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.mu.Lock()
		s := l.source(key)
		s.decay(l.now(), l.cfg.FailureRate)
		free := l.cfg.Startups - s.inflight - int(math.Ceil(s.debt))
		if free > 0 {
			s.inflight++
			if queued {
				s.waiting--
				l.waiting--
			}
			l.mu.Unlock()
			return t, nil
		}
		if !queued {
			if s.waiting >= l.cfg.Queue || l.waiting >= l.cfg.QueueTotal {
				l.gc(key, s)
				l.mu.Unlock()
				return nil, ErrQueueFull
			}
			s.waiting++
			l.waiting++
			queued, t.Waited = true, true
			if l.queued != nil {
				l.mu.Unlock()
				l.queued()
				continue // look again: the world may have changed meanwhile
			}
		}
		wake := s.wake
		// Debt alone can free a startup in time; inflight ones free it when they end.
		var wait time.Duration = -1
		if s.debt > 0 && l.cfg.Startups-s.inflight > 0 {
			excess := s.debt - float64(l.cfg.Startups-s.inflight-1)
			wait = time.Duration(excess/l.cfg.FailureRate*float64(time.Second)) + time.Millisecond
		}
		l.mu.Unlock()
		var tick <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		select {
		case <-wake:
		case <-tick:
		case <-ctx.Done():
			l.mu.Lock()
			s := l.source(key)
			s.waiting--
			l.waiting--
			l.gc(key, s)
			l.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// Done ends the handshake: failed handshakes are charged to the source.
func (t *Ticket) Done(ok bool) {
	t.once.Do(func() {
		l := t.l
		l.mu.Lock()
		defer l.mu.Unlock()
		s := l.source(t.key)
		s.decay(l.now(), l.cfg.FailureRate)
		s.inflight--
		if !ok {
			s.debt = math.Min(s.debt+1, float64(l.cfg.Startups))
		}
		close(s.wake)
		s.wake = make(chan struct{})
		l.gc(t.key, s)
	})
}

// Penalized reports whether a's source has failures not yet forgiven that fill all its
// startups (for status output and tests).
func (l *Limiter) Penalized(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sources[l.Source(a)]
	if !ok {
		return false
	}
	s.decay(l.now(), l.cfg.FailureRate)
	return int(math.Ceil(s.debt)) >= l.cfg.Startups
}

// Sources is how many sources are tracked now.
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sources)
}

func (l *Limiter) source(key netip.Prefix) *source {
	if l.calls++; l.calls >= 4096 {
		l.calls = 0
		l.sweep()
	}
	s, ok := l.sources[key]
	if !ok {
		s = &source{at: l.now(), wake: make(chan struct{})}
		l.sources[key] = s
	}
	return s
}

// gc forgets a source with nothing in progress and nothing to forgive.
func (l *Limiter) gc(key netip.Prefix, s *source) {
	if s.inflight == 0 && s.waiting == 0 && s.debt == 0 {
		delete(l.sources, key)
	}
}

// sweep forgets sources whose failures have all been forgiven since they were last seen.
func (l *Limiter) sweep() {
	now := l.now()
	for k, s := range l.sources {
		s.decay(now, l.cfg.FailureRate)
		l.gc(k, s)
	}
}

func (s *source) decay(now time.Time, rate float64) {
	if d := now.Sub(s.at); d > 0 {
		s.debt = math.Max(0, s.debt-d.Seconds()*rate)
		s.at = now
	}
}
