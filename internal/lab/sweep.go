package lab

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Failure is one request a sweep saw fail: where, why and when (to find it in the
// logs kept with --logs).
type Failure struct {
	Addr string
	Err  string
	At   time.Time
}

func (f Failure) String() string {
	return f.Addr + " at " + f.At.Format("15:04:05.000") + ": " + f.Err
}

// FailedAddrs lists the addresses of failures.
func FailedAddrs(failures []Failure) []string {
	out := make([]string, len(failures))
	for i, f := range failures {
		out[i] = f.Addr
	}
	return out
}

// Sweep sends one request to each address, conc at a time; it returns how many
// answered, those that did not, and the first error.
func Sweep(ctx context.Context, t Target, addrs []string, conc int) (ok int, failed []Failure, firstErr string) {
	var next, good atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(conc, len(addrs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(addrs) || ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := Request(rctx, t, addrs[i])
				cancel()
				if err == nil {
					good.Add(1)
					continue
				}
				mu.Lock()
				failed = append(failed, Failure{Addr: addrs[i], Err: err.Error(), At: time.Now()})
				if firstErr == "" {
					firstErr = err.Error()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(good.Load()), failed, firstErr
}

// UntilAll sweeps the addresses that have not answered yet until all have, or timeout;
// back is from since to the last answer (-1 if some never answered).
func UntilAll(ctx context.Context, t Target, addrs []string, conc int, timeout time.Duration, since time.Time) (back time.Duration, answered int, firstErr string) {
	pending := addrs
	deadline := time.Now().Add(timeout)
	for len(pending) > 0 && ctx.Err() == nil && time.Now().Before(deadline) {
		ok, failed, err := Sweep(ctx, t, pending, conc)
		pending, firstErr = FailedAddrs(failed), err
		answered += ok
		if len(pending) > 0 {
			select { // not back yet: the next pass in a moment
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if len(pending) > 0 {
		return -1, answered, firstErr
	}
	return time.Since(since), answered, ""
}
