package sshtest

import (
	"errors"
	"testing"
	"time"
)

// Retries collects the errors a client's OnRetry hook reports (agent, uplink).
type Retries chan error

// NewRetries makes room for 64 reports; more are dropped.
func NewRetries() Retries { return make(Retries, 64) }

// OnRetry is the hook to give the client.
func (r Retries) OnRetry(err error, _ time.Duration) {
	select {
	case r <- err:
	default:
	}
}

// Await waits until a reported error is want (errors.Is), among the first 10 reports:
// earlier ones may be other failures of a loaded machine (a handshake past its
// timeout). The minute's wait for each is a failure guard, not a timing assertion.
func (r Retries) Await(t testing.TB, want error) {
	t.Helper()
	var last error
	for range 10 {
		select {
		case last = <-r:
		case <-time.After(time.Minute):
			t.Fatalf("no session ended in a minute (want %v)", want)
		}
		if errors.Is(last, want) {
			return
		}
	}
	t.Fatalf("sessions ended with %v, want %v", last, want)
}
