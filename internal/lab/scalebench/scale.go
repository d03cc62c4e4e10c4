package scalebench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// Options of a run.
type Options struct {
	Gateways int // gateway hubs; 0 means 100 (2 with Quick)
	Devices  int // simulated devices per gateway; 0 means 1,000 (5 with Quick)
	// Direct devices connect to the centre themselves, for comparison; 0 means 1,000 (5
	// with Quick), never more than the devices behind gateways.
	Direct      int
	Window      time.Duration // load per path; 0 means 10 s (1 s with Quick)
	Concurrency int           // requests in flight; 0 means 32 (4 with Quick)
	Timeout     time.Duration // the longest wait for any phase; 0 means 10 min
	Quick       bool
	Progress    *lab.Progress
}

func (o *Options) defaults() {
	lab.Default(&o.Gateways, o.Quick, 100, 2)
	lab.Default(&o.Devices, o.Quick, 1000, 5)
	lab.Default(&o.Direct, o.Quick, 1000, 5)
	lab.Default(&o.Concurrency, o.Quick, 32, 4)
	o.Direct = min(o.Direct, o.Gateways*o.Devices)
	if o.Window == 0 {
		o.Window = 10 * time.Second
		if o.Quick {
			o.Window = time.Second
		}
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = &lab.Progress{}
	}
}

// Centre is the central hub's footprint at one moment.
type Centre struct {
	Sessions int   `json:"sessions"` // gateway, child and direct sessions
	PSSKiB   int64 `json:"pss_kib"`
	RSSKiB   int64 `json:"rss_kib"`
	FDs      int   `json:"descriptors"`
}

// Sweep is one request to each of many devices.
type Sweep struct {
	Devices  int           `json:"devices"`
	Answered int           `json:"answered"`
	Elapsed  time.Duration `json:"-"`
	FirstErr string        `json:"first_error,omitempty"`
	// Failed names the devices whose request failed (at most maxNamed), each with
	// its socket address, when and why; Retried is how many of all that failed
	// answered when asked once more, after the sweep.
	Failed  []string `json:"failed,omitempty"`
	Retried int      `json:"answered_at_second_attempt"`
}

// maxNamed bounds the failed devices a sweep names.
const maxNamed = 20

// Path is the load through one kind of device: behind gateways, or direct.
type Path struct {
	Name    string
	Devices int
	Load    lab.LoadResult
	// CentreCPU is the centre's CPU over the window; GatewayCPU every gateway's.
	CentreCPU, GatewayCPU time.Duration
}

// Recovery is a restart and the time until every affected device answered again.
type Recovery struct {
	What     string
	Devices  int
	Stop     time.Duration // the clean stop (SIGTERM) of the old hub process
	HubStart time.Duration // from the new process's start to its listening
	// Served is from the hub listening to the centre serving every affected device again
	// (-1: not within the timeout); Back to the last of them answering a request (-1: not
	// all did): a sweep of every device, so it includes the sweep's own time.
	Served, Back time.Duration
	Answered     int
	// AtFirstAsk is how many answered the first request of the sweep, which starts
	// only once every device is served again: all of them means every device answered
	// from Served on, whatever the sweep's own length.
	AtFirstAsk int
	Moved      int // devices whose socket address changed
	FirstErr   string
	Failed     []string // the devices that failed their first ask, as Sweep.Failed
}

// Results is what a run measured.
type Results struct {
	Options             Options
	Behind, Direct      int    // devices established at the centre through gateways, and directly
	Base, Behind1, Full Centre // the centre with only its gateways, with their devices, with the direct devices too
	First               Sweep  // every device answering one request, once all are up
	Paths               []Path
	Recoveries          []Recovery
}

// network is the lab's topology: the centre's namespace with a bridge, each gateway's
// namespace joined to it by a veth pair.
const (
	centreIP   = "10.77.0.1"
	centrePort = 2222
	// The centre's pool: room for 262,144 devices, each port taken once (shared listeners).
	centrePool = "127.128.0.0/14"
	gwPool     = "127.128.0.0/16"
)

func ipIn(ns string, args ...string) error {
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// gateway is one gateway hub of the run with its fleet.
type gateway struct {
	name  string
	ns    *lab.Netns
	lh    *lab.LabHub
	opts  lab.IoTsafeOpts
	hub   *lab.SSHServer
	fleet *lab.Proc
}

func (g *gateway) stop() {
	if g.fleet != nil {
		g.fleet.Stop()
		g.fleet = nil
	}
	if g.hub != nil {
		g.hub.Proc.Stop()
		g.hub = nil
	}
}

// Measure runs the experiment; what it measured before an error is kept in Results.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Options: o}
	p := o.Progress
	lab.RaiseFileLimit(p)
	p.Start(9)
	behind := o.Gateways * o.Devices

	p.Step("the centre's namespace and hub")
	cns, err := lab.NewNetns(lab.NetnsName("scale-c"), 64, 0)
	if err != nil {
		return res, err
	}
	defer cns.Close()
	for _, args := range [][]string{{"link", "add", "br0", "type", "bridge"}, {"addr", "add", centreIP + "/16", "dev", "br0"}, {"link", "set", "br0", "up"}} {
		if err := ipIn(cns.Name, args...); err != nil {
			return res, err
		}
	}
	gwKeys, err := b.Scratch("gateway-keys")
	if err != nil {
		return res, err
	}
	centreAddr := fmt.Sprintf("%s:%d", centreIP, centrePort)
	co := lab.IoTsafeOpts{Sessions: o.Direct, Forwards: 1, Prefix: "direct", Netns: cns, SSHListen: centreAddr,
		Pool: sockets.Config{CIDR: centrePool, SharedListeners: true},
		Enroll: func(ctx context.Context, adm lab.Admin) error {
			return lab.EnrollGateways(ctx, adm, gwKeys, o.Gateways, o.Devices)
		}}
	clh, err := b.EnrollIoTsafe(ctx, "centre", co)
	if err != nil {
		return res, fmt.Errorf("enrolling the centre: %w", err)
	}
	centre, err := b.StartEnrolled(ctx, clh, co)
	if err != nil {
		return res, err
	}
	defer func() { centre.Proc.Stop() }()
	app, err := lab.StartProc("app", nil, cns.Exec(b.Bin, "bench", "serve-app", "--listen", centreIP+":0", "--size", fmt.Sprint(b.Size))...)
	if err != nil {
		return res, err
	}
	defer app.Stop()
	appAddr, err := app.ReadLine(ctx, "listening ")
	if err != nil {
		return res, err
	}

	p.Step(fmt.Sprintf("%d gateway hubs, each in its own namespace", o.Gateways))
	hubKey := ssh.FingerprintSHA256(centre.HostKey)
	gws := make([]*gateway, o.Gateways)
	defer func() {
		// All at once: a gateway with its devices takes seconds to stop, and a run has
		// up to a hundred.
		var wg sync.WaitGroup
		for _, g := range gws {
			if g != nil {
				wg.Go(func() {
					g.stop()
					g.ns.Close()
				})
			}
		}
		wg.Wait()
	}()
	for i := range gws {
		g, err := startGateway(ctx, b, cns, i, o.Devices, centreAddr, hubKey, filepath.Join(gwKeys, lab.GatewayName(i)))
		if g != nil {
			gws[i] = g
		}
		if err != nil {
			return res, err
		}
	}
	if err := waitSessions(ctx, centre, o.Gateways, o.Timeout); err != nil {
		return res, fmt.Errorf("gateways connecting to the centre: %w", err)
	}
	res.Base = footprint(centre)

	p.Step(fmt.Sprintf("%d devices behind the gateways (%d each)", behind, o.Devices))
	if err := startFleets(ctx, b, gws, appAddr, o.Devices, p); err != nil {
		return res, err
	}
	err = waitSessions(ctx, centre, o.Gateways+behind, o.Timeout)
	res.Behind1 = footprint(centre)
	res.Behind = max(0, res.Behind1.Sessions-o.Gateways)
	if err != nil {
		return res, fmt.Errorf("devices behind gateways at the centre: %w", err)
	}

	p.Step(fmt.Sprintf("%d devices connected to the centre directly", o.Direct))
	direct, _, err := b.StartFleet(ctx, centre, appAddr, o.Direct, 1)
	if err != nil {
		return res, err
	}
	defer func() { direct.Stop() }()
	err = waitSessions(ctx, centre, o.Gateways+behind+o.Direct, o.Timeout)
	res.Full = footprint(centre)
	res.Direct = max(0, res.Full.Sessions-res.Behind1.Sessions)
	if err != nil {
		return res, fmt.Errorf("direct devices: %w", err)
	}

	byDevice, err := centre.SocketsByDevice(ctx)
	if err != nil {
		return res, err
	}
	var viaGW, viaDirect []string
	for name, addrs := range byDevice {
		switch {
		case strings.HasPrefix(name, "direct"):
			viaDirect = append(viaDirect, addrs...)
		case strings.HasPrefix(name, "g") && !strings.HasPrefix(name, "gw"):
			viaGW = append(viaGW, addrs...)
		}
	}
	dial := cns.Dial
	target := lab.Target{Name: "scale", Size: b.Size, Dial: dial}

	p.Step(fmt.Sprintf("one request to each of the %d devices", len(viaGW)+len(viaDirect)))
	start := time.Now()
	ok, failed, firstErr := lab.Sweep(ctx, target, append(append([]string{}, viaGW...), viaDirect...), 4*o.Concurrency)
	res.First = Sweep{Devices: len(viaGW) + len(viaDirect), Answered: ok, Elapsed: time.Since(start), FirstErr: firstErr}
	owner := map[string]string{}
	for name, addrs := range byDevice {
		for _, a := range addrs {
			owner[a] = name
		}
	}
	if len(failed) > 0 {
		// Asked once more, so a failure under load is told from a device that is not
		// there; both counts are reported.
		res.First.Failed = name(owner, failed)
		res.First.Retried, _, _ = lab.Sweep(ctx, target, lab.FailedAddrs(failed), 4*o.Concurrency)
		p.Note(fmt.Sprintf("%d devices did not answer the first request (%s); %d answered the second", len(failed), firstErr, res.First.Retried))
	}

	p.Step(fmt.Sprintf("load for %s through gateways, then directly", o.Window))
	gwPIDs := func() []int {
		var pids []int
		for _, g := range gws {
			if g.hub != nil {
				pids = append(pids, g.hub.Proc.PID())
			}
		}
		return pids
	}
	for _, path := range []struct {
		name  string
		addrs []string
	}{{"through gateways", viaGW}, {"direct", viaDirect}} {
		t := target
		t.Addrs = path.addrs
		c0, g0 := cpu(centre.Proc.PID()), cpu(gwPIDs()...)
		r := lab.Load(ctx, t, o.Concurrency, o.Window/5, o.Window, nil)
		res.Paths = append(res.Paths, Path{Name: path.name, Devices: len(path.addrs), Load: r,
			CentreCPU: cpu(centre.Proc.PID()) - c0, GatewayCPU: cpu(gwPIDs()...) - g0})
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}

	p.Step("a gateway restarts (its devices reconnect to it)")
	g0 := gws[0]
	g0addrs := filter(byDevice, g0.opts.Prefix)
	restart := time.Now()
	g0.stop()
	stopped := time.Now()
	if g0.hub, err = b.StartEnrolled(ctx, g0.lh, g0.opts); err != nil {
		return res, fmt.Errorf("restarting %s: %w", g0.name, err)
	}
	rec := Recovery{What: "gateway " + g0.name, Devices: o.Devices, Stop: stopped.Sub(restart), HubStart: time.Since(stopped)}
	listening := time.Now()
	if g0.fleet, _, err = b.StartFleet(ctx, g0.hub, appAddr, o.Devices, 1); err != nil {
		return res, err
	}
	rec.Served = served(ctx, centre, res.Full.Sessions, o.Timeout, listening)
	rec.answer(ctx, target, g0addrs, 4*o.Concurrency, o.Timeout, listening, owner)
	rec.Moved = moved(ctx, centre, byDevice, g0.opts.Prefix)
	res.Recoveries = append(res.Recoveries, rec)

	p.Step("the centre restarts (gateways reconnect and announce their devices again)")
	direct.Stop() // the lab's direct devices do not reconnect by themselves
	restart = time.Now()
	centre.Proc.Stop()
	stopped = time.Now()
	if centre, err = b.StartEnrolled(ctx, clh, co); err != nil {
		return res, fmt.Errorf("restarting the centre: %w", err)
	}
	rec = Recovery{What: "centre", Devices: behind, Stop: stopped.Sub(restart), HubStart: time.Since(stopped)}
	listening = time.Now()
	rec.Served = served(ctx, centre, o.Gateways+behind, o.Timeout, listening)
	rec.answer(ctx, target, viaGW, 4*o.Concurrency, o.Timeout, listening, owner)
	rec.Moved = moved(ctx, centre, byDevice, "g")
	res.Recoveries = append(res.Recoveries, rec)
	p.Done()
	return res, ctx.Err()
}

// gatewayKeepalive is how often a gateway hub of the lab asks its devices.
const gatewayKeepalive = time.Minute

// startGateway makes gateway i's namespace (joined to the centre's bridge), enrols its
// devices and starts its hub with the centre as its upstream.
func startGateway(ctx context.Context, b *lab.Bench, cns *lab.Netns, i, devices int, centreAddr, hubKey, key string) (*gateway, error) {
	ns, err := lab.NewNetns(lab.NetnsName(fmt.Sprintf("scale-g%d", i)), 0, 0)
	if err != nil {
		return nil, err
	}
	g := &gateway{name: lab.GatewayName(i), ns: ns}
	veth := fmt.Sprintf("vg%d", i)
	host := i + 2
	for _, step := range []struct {
		ns   string
		args []string
	}{
		{cns.Name, []string{"link", "add", veth, "type", "veth", "peer", "name", "up0", "netns", ns.Name}},
		{cns.Name, []string{"link", "set", veth, "master", "br0", "up"}},
		{ns.Name, []string{"addr", "add", fmt.Sprintf("10.77.%d.%d/16", host/256, host%256), "dev", "up0"}},
		{ns.Name, []string{"link", "set", "up0", "up"}},
	} {
		if err := ipIn(step.ns, step.args...); err != nil {
			return g, err
		}
	}
	g.opts = lab.IoTsafeOpts{Sessions: devices, Forwards: 1, Prefix: fmt.Sprintf("g%d-", i), Netns: ns, SSHListen: "127.0.0.1:2222",
		Pool: sockets.Config{CIDR: gwPool, SharedListeners: true},
		Configure: func(c *hub.Config) {
			c.Upstream = hub.UpstreamConfig{Hub: centreAddr, HubKey: hubKey, Name: g.name, Key: key}
			// The simulated devices share this machine with the centre: a keepalive every
			// minute instead of every 15 s keeps 100,000 of them from costing a core.
			c.SSH.KeepaliveInterval = gatewayKeepalive
		}}
	if g.lh, err = b.EnrollIoTsafe(ctx, g.name, g.opts); err != nil {
		return g, fmt.Errorf("enrolling %s: %w", g.name, err)
	}
	if g.hub, err = b.StartEnrolled(ctx, g.lh, g.opts); err != nil {
		return g, fmt.Errorf("starting %s: %w", g.name, err)
	}
	return g, nil
}

// startFleets connects every gateway's devices, a few gateways at a time (the
// handshakes are what costs).
func startFleets(ctx context.Context, b *lab.Bench, gws []*gateway, appAddr string, devices int, progress *lab.Progress) error {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, g := range gws {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f, _, err := b.StartFleet(ctx, g.hub, appAddr, devices, 1)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && ctx.Err() == nil {
				// Said at once: a run of 100 gateways takes long to end after one fails.
				progress.Note(fmt.Sprintf("%s's devices did not all connect: %v", g.name, err))
			}
			if err != nil && first == nil {
				first = fmt.Errorf("%s's devices: %w", g.name, err)
			}
			g.fleet = f
		}()
	}
	wg.Wait()
	return first
}

// answer asks every device once, then the ones that failed until they answer or the
// timeout; Back is from since to the last answer. FirstErr is why a first ask failed,
// or why a device never answered.
func (rec *Recovery) answer(ctx context.Context, t lab.Target, addrs []string, conc int, timeout time.Duration, since time.Time, owner map[string]string) {
	ok, failed, firstErr := lab.Sweep(ctx, t, addrs, conc)
	rec.AtFirstAsk, rec.Answered, rec.Back, rec.FirstErr = ok, ok, time.Since(since), firstErr
	if len(failed) > 0 {
		rec.Failed = name(owner, failed)
		var more int
		var lastErr string
		rec.Back, more, lastErr = lab.UntilAll(ctx, t, lab.FailedAddrs(failed), conc, timeout, since)
		rec.Answered += more
		if lastErr != "" {
			rec.FirstErr = lastErr // why some never answered
		}
	}
}

// name lists the first maxNamed failures with their devices' names (owner: socket
// address -> device).
func name(owner map[string]string, failed []lab.Failure) []string {
	var out []string
	for _, f := range failed[:min(len(failed), maxNamed)] {
		out = append(out, owner[f.Addr]+" "+f.String())
	}
	return out
}

// waitSessions waits until the centre holds n sessions (gateways, their devices and
// direct devices).
func waitSessions(ctx context.Context, centre *lab.SSHServer, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := -1
	for {
		if st, err := centre.Status(); err == nil {
			last = st.Sessions
			if last >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the centre holds %d sessions after %s, want %d", last, timeout, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling the centre's status is the measurement
		}
	}
}

// served waits until the centre holds n sessions again and says how long after since
// (-1: not within timeout).
func served(ctx context.Context, centre *lab.SSHServer, n int, timeout time.Duration, since time.Time) time.Duration {
	if waitSessions(ctx, centre, n, timeout) != nil {
		return -1
	}
	return time.Since(since)
}

// footprint reads the centre's sessions, memory and descriptors.
func footprint(centre *lab.SSHServer) Centre {
	var c Centre
	if st, err := centre.Status(); err == nil {
		c.Sessions = st.Sessions
	}
	if m, err := lab.TreeMemory(centre.Proc.PID()); err == nil {
		c.PSSKiB, c.RSSKiB = m.PSS, m.RSS
	}
	c.FDs, _ = lab.OpenFiles(centre.Proc.PID())
	return c
}

func cpu(pids ...int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		if d, err := lab.TreeCPU(pid); err == nil {
			sum += d
		}
	}
	return sum
}

// filter lists the socket addresses of the devices whose names have prefix.
func filter(byDevice map[string][]string, prefix string) []string {
	var out []string
	for name, addrs := range byDevice {
		if strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "gw") {
			out = append(out, addrs...)
		}
	}
	return out
}

// moved counts the devices (names with prefix) whose socket addresses at the centre are
// no longer those of before.
func moved(ctx context.Context, centre *lab.SSHServer, before map[string][]string, prefix string) int {
	now, err := centre.SocketsByDevice(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for name, addrs := range before {
		if !strings.HasPrefix(name, prefix) || strings.HasPrefix(name, "gw") {
			continue
		}
		if strings.Join(now[name], ",") != strings.Join(addrs, ",") {
			n++
		}
	}
	return n
}
