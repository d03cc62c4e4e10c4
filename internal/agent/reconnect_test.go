package agent

import (
	"context"
	"strings"
	"testing"
	"time"
)

// After a working session was lost (a hub restart), attempts come at most RecentMax
// apart for RecentWindow, jittered so a fleet does not arrive at once; otherwise the
// exponential backoff up to BackoffMax applies.
func TestReconnectDelay(t *testing.T) {
	cfg := Config{}
	cfg.applyDefaults()
	a := &Agent{cfg: cfg}
	const attempt = 10 // far into the exponential backoff
	var long bool
	for range 200 {
		if d := a.reconnectDelay(attempt, time.Now()); d < cfg.BackoffMin || d > cfg.RecentMax {
			t.Fatalf("just after losing a session: %v, want within [%v, %v]", d, cfg.BackoffMin, cfg.RecentMax)
		}
		d := a.reconnectDelay(attempt, time.Time{})
		if d < cfg.BackoffMin || d > cfg.BackoffMax {
			t.Fatalf("never connected: %v outside [%v, %v]", d, cfg.BackoffMin, cfg.BackoffMax)
		}
		if a.reconnectDelay(attempt, time.Now().Add(-2*cfg.RecentWindow)) > cfg.RecentMax {
			long = true
		}
	}
	if !long {
		t.Fatal("long after the last session the backoff never went past RecentMax")
	}
}

// An agent is alive while it shows progress; silent for longer than its slowest
// legitimate step twice (here the default keepalive interval and timeout: 60 s), it is
// not, and the error says for how long. Progress makes it alive again.
func TestAlive(t *testing.T) {
	cfg := Config{}
	cfg.applyDefaults()
	a := &Agent{cfg: cfg, born: time.Now()}
	if err := a.Alive(); err != nil {
		t.Fatalf("a new agent: %v", err)
	}
	if got := a.aliveLimit(); got != 2*time.Minute {
		t.Fatalf("limit %v with the defaults, want 2m", got)
	}
	a.born = a.born.Add(-3 * time.Minute) // the last progress was 3 minutes ago
	err := a.Alive()
	if err == nil || !strings.Contains(err.Error(), "no progress for 3m0s (more than 2m0s; session up: false)") {
		t.Fatalf("silent for 3 minutes: %v", err)
	}
	a.progress()
	if err := a.Alive(); err != nil {
		t.Fatalf("after progress: %v", err)
	}
}

// A wait shows progress while it lasts and ends with its context.
func TestWaitEndsWithContext(t *testing.T) {
	a := &Agent{born: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.wait(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("wait after cancel: %v", err)
	}
	if err := a.wait(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("short wait: %v", err)
	}
}
