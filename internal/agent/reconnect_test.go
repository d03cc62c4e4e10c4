package agent

import (
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
