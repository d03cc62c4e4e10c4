package hubbench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Batch makes one request through each address, at most concurrency at a time, and
// returns the wall time of the whole batch (the paper's "time for N parallel requests").
func Batch(ctx context.Context, addrs []string, size, concurrency int) (time.Duration, int, error) {
	var bad atomic.Int64
	var first atomic.Value
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for _, a := range addrs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := lab.Request(ctx, lab.Target{Size: size}, a); err != nil {
				bad.Add(1)
				first.CompareAndSwap(nil, fmt.Errorf("through %s: %w", a, err))
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	if e, _ := first.Load().(error); e != nil {
		return d, int(bad.Load()), e
	}
	return d, 0, ctx.Err()
}

// SweepRow is one timed batch of fig. 17 (K inactive forwards) or fig. 19 (S sessions x P).
type SweepRow struct {
	Part     string // "inactive" or "ps"
	Server   string
	Sessions int
	Forwards int // per session
	Active   int // forwards that get a request
	K        int // inactive forwards (fig. 17)
	Rep      int
	Seconds  float64
}

// sweepServers are the SSH servers of figs. 17 and 19 and their forward cap per session.
var sweepServers = []struct {
	name   string
	maxPer int // 0: none
}{{"iotsafe", 0}, {"openssh", 0}, {"dropbear", 20}}

func startSSH(ctx context.Context, b *lab.Bench, server, tag string, s, p int) (*lab.SSHServer, error) {
	switch server {
	case "iotsafe":
		return b.StartIoTsafe(ctx, tag, lab.IoTsafeOpts{Sessions: s, Forwards: p, UserSpace: true})
	case "openssh":
		return b.StartOpenSSH(ctx)
	case "dropbear":
		return b.StartDropbear(ctx)
	}
	return nil, fmt.Errorf("lab: unknown server %q", server)
}

// timed starts server with s x p forwards and times reps batches over the first active ones.
func timed(ctx context.Context, b *lab.Bench, o *Options, appAddr, server, tag string, s, p, active int, row SweepRow, res *Results) error {
	srv, err := startSSH(ctx, b, server, tag, s, p)
	if err != nil {
		return err
	}
	defer srv.Proc.Stop()
	fleet, addrs, err := b.StartFleet(ctx, srv, appAddr, s, p)
	if err != nil {
		return err
	}
	defer fleet.Stop()
	if active > len(addrs) {
		return fmt.Errorf("lab: %d forwards, %d wanted active", len(addrs), active)
	}
	// Active forwards spread over all sessions: every (len/active)-th address.
	step := len(addrs) / active
	var use []string
	for i := 0; i < len(addrs) && len(use) < active; i += step {
		use = append(use, addrs[i])
	}
	if _, _, err := Batch(ctx, use, b.Size, o.BatchConcurrency); err != nil { // warm-up
		return fmt.Errorf("warm-up batch: %w", err)
	}
	for rep := 1; rep <= o.Reps; rep++ {
		d, _, err := Batch(ctx, use, b.Size, o.BatchConcurrency)
		if err != nil {
			return err
		}
		r := row
		r.Server, r.Sessions, r.Forwards, r.Active, r.Rep, r.Seconds = server, s, p, active, rep, d.Seconds()
		res.Sweeps = append(res.Sweeps, r)
	}
	return nil
}

// runInactive is fig. 17: one session with Active active forwards plus K inactive ones.
func runInactive(ctx context.Context, b *lab.Bench, o *Options, res *Results, appAddr string) {
	for _, sv := range sweepServers {
		if !o.server(sv.name) {
			continue
		}
		for _, k := range o.InactiveK {
			p := o.Active + k
			key := fmt.Sprintf("inactive %s k=%d", sv.name, k)
			if sv.maxPer > 0 && p > sv.maxPer {
				res.Skipped[key] = fmt.Sprintf("%s accepts at most %d forwards per session", sv.name, sv.maxPer)
			} else if err := timed(ctx, b, o, appAddr, sv.name, fmt.Sprintf("inactive-%s-%d", sv.name, k), 1, p, o.Active, SweepRow{Part: "inactive", K: k}, res); err != nil {
				res.Skipped[key] = err.Error()
			}
			o.Progress.Step(key)
		}
	}
}

// runPS is fig. 19: Total active forwards spread over S sessions.
func runPS(ctx context.Context, b *lab.Bench, o *Options, res *Results, appAddr string) {
	for _, sv := range sweepServers {
		if !o.server(sv.name) {
			continue
		}
		for _, s := range o.PSSessions {
			p := o.Total / s
			key := fmt.Sprintf("ps %s S=%d P=%d", sv.name, s, p)
			if sv.maxPer > 0 && p > sv.maxPer {
				res.Skipped[key] = fmt.Sprintf("%s accepts at most %d forwards per session", sv.name, sv.maxPer)
			} else if err := timed(ctx, b, o, appAddr, sv.name, fmt.Sprintf("ps-%s-%d", sv.name, s), s, p, s*p, SweepRow{Part: "ps"}, res); err != nil {
				res.Skipped[key] = err.Error()
			}
			o.Progress.Step(key)
		}
	}
}

// medianSeconds of the sweep rows matching keep.
func medianSeconds(rows []SweepRow, keep func(SweepRow) bool) (float64, bool) {
	var v []float64
	for _, r := range rows {
		if keep(r) {
			v = append(v, r.Seconds)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}
