package throttle

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/fakeclock"
)

func newLimiter(t *testing.T, cfg Config) (*Limiter, *fakeclock.Clock) {
	t.Helper()
	cfg.ApplyDefaults()
	if err := cfg.Validate("test"); err != nil {
		t.Fatal(err)
	}
	l := New(cfg)
	c := fakeclock.New(time.Unix(1000, 0))
	l.now = c.Now
	return l, c
}

var (
	attacker = netip.MustParseAddr("192.0.2.1")
	other    = netip.MustParseAddr("192.0.2.2")
)

// noWait is a context that has already ended: Acquire must answer without waiting.
func noWait() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestFailuresHoldStartupsUntilForgiven(t *testing.T) {
	l, clk := newLimiter(t, Config{Startups: 4, FailureRate: 2})
	for i := 0; i < 4; i++ {
		tk, err := l.Acquire(noWait(), attacker)
		if err != nil {
			t.Fatalf("startup %d refused: %v", i, err)
		}
		tk.Done(false)
	}
	if !l.Penalized(attacker) {
		t.Fatal("four failures with four startups: the source should be penalized")
	}
	if _, err := l.Acquire(noWait(), attacker); !errors.Is(err, context.Canceled) {
		t.Fatalf("a penalized source got a startup at once: %v", err)
	}
	// Another source is not affected.
	tk, err := l.Acquire(noWait(), other)
	if err != nil {
		t.Fatalf("other source refused: %v", err)
	}
	tk.Done(true)
	// Half a second forgives one failure at 2/s.
	clk.Add(500 * time.Millisecond)
	tk, err = l.Acquire(noWait(), attacker)
	if err != nil {
		t.Fatalf("after one failure was forgiven: %v", err)
	}
	tk.Done(false)
	if _, err := l.Acquire(noWait(), attacker); err == nil {
		t.Fatal("the new failure should fill the startups again")
	}
	// Long enough forgives everything, and the source is forgotten.
	clk.Add(time.Minute)
	tk, err = l.Acquire(noWait(), attacker)
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(true)
	if n := l.Sources(); n != 0 {
		t.Fatalf("%d sources tracked after everything was forgiven", n)
	}
}

func TestSuccessCostsNothing(t *testing.T) {
	l, _ := newLimiter(t, Config{Startups: 2})
	for i := 0; i < 1000; i++ {
		tk, err := l.Acquire(noWait(), attacker)
		if err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		tk.Done(true)
		tk.Done(false) // a second Done changes nothing
	}
	if l.Penalized(attacker) || l.Sources() != 0 {
		t.Fatal("successful handshakes left a trace")
	}
}

// A fleet behind one address that reconnects at once: everything beyond the startups
// waits for its turn and gets in, nothing is refused.
func TestQueuedConnectionsGetInInTurn(t *testing.T) {
	l, _ := newLimiter(t, Config{Startups: 3, Queue: 100})
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := l.Acquire(context.Background(), attacker)
			if err != nil {
				errs <- err
				return
			}
			tk.Done(true)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestQueueBound(t *testing.T) {
	l, _ := newLimiter(t, Config{Startups: 1, Queue: 2})
	held, err := l.Acquire(noWait(), attacker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	queued := make(chan struct{}, 2)
	l.queued = func() { queued <- struct{}{} }
	results := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			tk, err := l.Acquire(ctx, attacker)
			if err == nil {
				tk.Done(true)
			}
			results <- err
		}()
	}
	// Once both are queued, a third is refused at once.
	<-queued
	<-queued
	if _, err := l.Acquire(context.Background(), attacker); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third waiter: %v, want ErrQueueFull", err)
	}

	held.Done(true)
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}

// A waiter blocked only by unforgiven failures wakes up by itself when they decay.
func TestWaiterWakesWhenDebtDecays(t *testing.T) {
	cfg := Config{Startups: 1, FailureRate: 1000}
	cfg.ApplyDefaults()
	l := New(cfg) // real clock: 1 ms per forgiven failure
	tk, err := l.Acquire(context.Background(), attacker)
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(false)
	tk, err = l.Acquire(context.Background(), attacker)
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(true)
}

func TestSourcesGroupByPrefix(t *testing.T) {
	l, _ := newLimiter(t, Config{IPv4Prefix: 24})
	a, b := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("::ffff:198.51.100.9")
	if l.Source(a) != l.Source(b) {
		t.Fatalf("%v and %v should count as one source under /24", a, b)
	}
	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::ffff:1")
	if l.Source(v6a) != l.Source(v6b) {
		t.Fatal("addresses of one /64 should count as one source")
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []Config{{Startups: -1}, {FailureRate: -1}, {Queue: -1}, {IPv4Prefix: 33}, {IPv6Prefix: 7}} {
		cfg.ApplyDefaults()
		if err := cfg.Validate("ssh.per_source"); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestLogGate(t *testing.T) {
	g := NewLogGate(time.Minute)
	clk := fakeclock.New(time.Unix(0, 0))
	g.now = clk.Now
	if ok, _ := g.Allow("a"); !ok {
		t.Fatal("first line held back")
	}
	for i := 0; i < 5; i++ {
		if ok, _ := g.Allow("a"); ok {
			t.Fatal("line within the interval let through")
		}
	}
	if ok, _ := g.Allow("b"); !ok {
		t.Fatal("another key is independent")
	}
	clk.Add(time.Minute)
	ok, n := g.Allow("a")
	if !ok || n != 5 {
		t.Fatalf("after the interval: ok=%v suppressed=%d, want true 5", ok, n)
	}
}

// QueueTotal bounds the waiting connections of all sources together.
func TestQueueTotalBound(t *testing.T) {
	l, _ := newLimiter(t, Config{Startups: 1, Queue: 10, QueueTotal: 1})
	a, _ := l.Acquire(noWait(), attacker)
	b, _ := l.Acquire(noWait(), other)
	queued := make(chan struct{}, 1)
	l.queued = func() { queued <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, attacker); done <- err }()
	<-queued
	if _, err := l.Acquire(context.Background(), other); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a second waiter across sources: %v, want ErrQueueFull", err)
	}
	cancel()
	<-done
	a.Done(true)
	b.Done(true)
}
