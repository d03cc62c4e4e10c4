package outagebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/lab"
)

// Options of a run.
type Options struct {
	Devices int           // agents; 0 means 300 (the soak run's fleet), 5 with Quick
	Down    time.Duration // how long the hub stays down; 0 means 30 s, 1 s with Quick
	Reps    int           // outages in a row, same fleet; 0 means 1
	// Timeout bounds the wait for the whole fleet, at the start and after each
	// restart; 0 means 3 minutes. Devices not back by then count as missing.
	Timeout time.Duration
	// RecentMax is the agents' reconnect interval for a while after a lost session
	// (agent.Config.RecentMax); 0 keeps the agent's default.
	RecentMax time.Duration
	Quick     bool
	Progress  *lab.Progress
}

func (o *Options) defaults() {
	lab.Default(&o.Devices, o.Quick, 300, 5)
	lab.Default(&o.Down, o.Quick, 30*time.Second, time.Second)
	lab.Default(&o.Reps, o.Quick, 1, 1)
	lab.Default(&o.Timeout, o.Quick, 3*time.Minute, 3*time.Minute)
}

// Rep is one outage.
type Rep struct {
	Rep int
	// HubStart is from starting the hub process again to its listening.
	HubStart time.Duration
	// Back is per device, from the hub listening again to the device's session being
	// ready; -1 for a device not back within Options.Timeout.
	Back []time.Duration
	// Attempts are the fleet's connects, failed or not, relative to the hub listening
	// again (negative: during the outage).
	Attempts []time.Duration
	// HubCPU is the restarted hub's CPU from its start until the fleet was back.
	HubCPU time.Duration
}

// Results of a run.
type Results struct {
	Options Options
	// FirstConnect is per device, from every agent starting at once to its session
	// being ready (a cold start: the whole fleet at the same moment).
	FirstConnect []time.Duration
	Reps         []Rep
}

// fleet is the agents and what they report.
type fleet struct {
	mu       sync.Mutex
	since    time.Time       // the current phase's origin
	ready    []time.Duration // per device, the first ready in this phase (-1: not yet)
	pending  int             // devices not ready in this phase
	allReady chan struct{}   // closed when pending reaches 0
	attempts []time.Duration // connects, failed or not, relative to since
	lost     []bool          // per device, its session's end was reported in this phase
}

// phase starts counting from now: every device must be ready again.
func (f *fleet) phase(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since, f.pending, f.allReady, f.attempts = time.Now(), n, make(chan struct{}), nil
	f.ready, f.lost = make([]time.Duration, n), make([]bool, n)
	for i := range f.ready {
		f.ready[i] = -1
	}
}

// rebase moves the phase's origin to now (the hub listens again): times already
// recorded become negative.
func (f *fleet) rebase() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	shift := now.Sub(f.since)
	for i := range f.attempts {
		f.attempts[i] -= shift
	}
	for i, d := range f.ready {
		if d >= 0 {
			f.ready[i] = max(0, d-shift) // back before the hub said it listens
		}
	}
	f.since = now
}

func (f *fleet) onReady(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready == nil || f.ready[i] >= 0 {
		return
	}
	f.ready[i] = max(0, time.Since(f.since))
	f.attempts = append(f.attempts, f.ready[i]) // the connect that succeeded
	if f.pending--; f.pending == 0 {
		close(f.allReady)
	}
}

// onRetry counts a failed connect of device i; the first report of a phase is its
// session ending, which is no connect.
func (f *fleet) onRetry(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == nil {
		return
	}
	if !f.lost[i] {
		f.lost[i] = true
		return
	}
	f.attempts = append(f.attempts, time.Since(f.since))
}

// wait waits for every device or the timeout; it returns the phase's readings.
func (f *fleet) wait(ctx context.Context, timeout time.Duration) (ready, attempts []time.Duration, err error) {
	f.mu.Lock()
	all := f.allReady
	f.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-all:
	case <-t.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.ready...), append([]time.Duration(nil), f.attempts...), err
}

// Measure runs the experiment.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Options: o}
	p := o.Progress
	lab.RaiseFileLimit(p)
	p.Start(1 + 2*o.Reps)
	port, err := lab.StablePort() // the hub comes back on the same address
	if err != nil {
		return res, err
	}
	ho := lab.IoTsafeOpts{Sessions: o.Devices, Forwards: 1, SSHListen: fmt.Sprintf("127.0.0.1:%d", port)}
	lh, err := b.EnrollIoTsafe(ctx, "outage-hub", ho)
	if err != nil {
		return res, fmt.Errorf("enrolling %d devices: %w", o.Devices, err)
	}
	srv, err := b.StartEnrolled(ctx, lh, ho)
	if err != nil {
		return res, err
	}
	defer func() { srv.Proc.Stop() }()

	f := &fleet{}
	actx, stopAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	defer func() {
		stopAgents()
		agents.Wait()
	}()
	f.phase(o.Devices)
	for i := range o.Devices {
		a, err := newAgent(srv, lh.Keys, i, o, f)
		if err != nil {
			return res, err
		}
		agents.Add(1)
		go func() {
			defer agents.Done()
			a.Run(actx)
		}()
	}
	ready, _, err := f.wait(ctx, o.Timeout)
	res.FirstConnect = ready
	if err != nil {
		return res, err
	}
	p.Step(fmt.Sprintf("%d agents connected (slowest %s)", o.Devices, slowest(ready)))

	for rep := 1; rep <= o.Reps; rep++ {
		r := Rep{Rep: rep}
		f.phase(o.Devices)
		srv.Proc.Kill()
		p.Step(fmt.Sprintf("outage %d/%d: hub killed, down for %s", rep, o.Reps, o.Down))
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(o.Down): // the outage is the experiment
		}
		start := time.Now()
		if srv, err = b.StartEnrolled(ctx, lh, ho); err != nil {
			return res, fmt.Errorf("restarting the hub: %w", err)
		}
		r.HubStart = time.Since(start)
		f.rebase()
		ready, attempts, err := f.wait(ctx, o.Timeout)
		r.Back, r.Attempts = ready, attempts
		if cpu, cerr := lab.TreeCPU(srv.Proc.PID()); cerr == nil {
			r.HubCPU = cpu
		}
		res.Reps = append(res.Reps, r)
		if err != nil {
			return res, err
		}
		p.Step(fmt.Sprintf("outage %d/%d: fleet back, slowest %s after the hub", rep, o.Reps, slowest(ready)))
	}
	p.Done()
	return res, nil
}

// newAgent is device i's agent: the lab profile's one reverse alias, to a target that
// is never dialed (the bench measures sessions, not requests).
func newAgent(srv *lab.SSHServer, keys string, i int, o Options, f *fleet) (*agent.Agent, error) {
	name := fmt.Sprintf("dev%d", i)
	keyFile := filepath.Join(keys, name)
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	return agent.New(agent.Config{
		Hub: srv.Addr, Device: name, Signer: signer, KeyFile: keyFile, HostKey: ssh.FixedHostKey(srv.HostKey),
		Expose:    []agent.Expose{{Alias: "f0", Target: "127.0.0.1:9"}},
		RecentMax: o.RecentMax,
		OnReady:   func(string) { f.onReady(i) },
		OnRetry:   func(error, time.Duration) { f.onRetry(i) },
	})
}

// slowest is the largest reading, or "not all back".
func slowest(ds []time.Duration) string {
	worst := time.Duration(0)
	for _, d := range ds {
		if d < 0 {
			return "not all back"
		}
		worst = max(worst, d)
	}
	return worst.Round(time.Millisecond).String()
}
