package telemetry

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// A maintenance call whose caller gave up (its context ended while it waited for the
// writer) never runs later: it would write results the caller already read (the race
// CI found in pruneCommands) and do work nobody waits for.
func TestAbandonedMaintenanceNeverRuns(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	release := make(chan struct{})
	busy := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.maintain(context.Background(), func(*sqldb.Tx) error {
			close(busy)
			<-release // the writer is held here
			return nil
		})
	}()
	<-busy
	var ran atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Several: a call may also give up before it is queued (both are ready to select).
	for range 10 {
		if err := s.maintain(ctx, func(*sqldb.Tx) error { ran.Add(1); return nil }); err != context.Canceled {
			t.Fatalf("an abandoned call returned %v, want context.Canceled", err)
		}
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Requests are served in order: once this one ran, the abandoned one had its turn.
	if err := s.maintain(context.Background(), func(*sqldb.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d abandoned maintenance calls ran after their callers had returned", n)
	}
}
