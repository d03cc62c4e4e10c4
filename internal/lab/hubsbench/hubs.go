package hubsbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// Options configures 'iotsafe bench hubs'.
type Options struct {
	Quick bool
	// Hubs share the registry; 0 means 3.
	Hubs int
	// Devices are real agents, all starting at the first hub; 0 means 100 (5 with Quick).
	Devices int
	// Revokes are revocations timed, each of another device; 0 means 10 (2 with Quick).
	Revokes int
	// Timeout bounds each wait (the fleet up, a revocation, the recovery); 0 means 2m.
	Timeout  time.Duration
	Progress *lab.Progress
}

func (o *Options) defaults() {
	if o.Hubs == 0 {
		o.Hubs = 3
	}
	lab.Default(&o.Devices, o.Quick, 100, 5)
	lab.Default(&o.Revokes, o.Quick, 10, 2)
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
}

// Results is what a run measured.
type Results struct {
	Options Options
	// Up is how long the fleet took to be up at the first hub.
	Up time.Duration
	// Through is the first sweep: every device from the last hub's namespace, carried
	// to the first hub over their peer link.
	ThroughOK, ThroughN int
	ThroughErr          string
	// Command is how long 'iotsafe device revoke' took (its own start included);
	// Revoke is from its start to the session gone at the holding hub.
	Command, Revoke []time.Duration
	// Recovery: after the first hub was killed, how long until every remaining device
	// answered again through the last hub (-1: not all, Answered of Expected did).
	Recovery           time.Duration
	Answered, Expected int
	RecoveryErr        string
}

const (
	lanNet  = "10.78.0"
	sshPort = 2222
	pool    = "127.129.0.0/16"
)

// Measure runs the experiment; what it measured before an error is kept in Results.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Options: o}
	p := o.Progress
	p.Start(7)
	p.Step("PostgreSQL")
	pg, err := pgscratch.NewWith(pgscratch.Options{Durable: true})
	if err != nil {
		return res, err
	}
	defer pg.Close()
	dsn, err := pg.CreateDatabase()
	if err != nil {
		return res, err
	}

	p.Step(fmt.Sprintf("%d hubs on one segment", o.Hubs))
	sw, err := lab.NewNetns(lab.NetnsName("hubs-sw"), 0, 0)
	if err != nil {
		return res, err
	}
	defer sw.Close()
	if err := ip(sw.Name, "link", "add", "br0", "type", "bridge"); err != nil {
		return res, err
	}
	if err := ip(sw.Name, "link", "set", "br0", "up"); err != nil {
		return res, err
	}
	// join makes a namespace on the segment; dialers are threads locked in it: only the
	// last hub's namespace, where requests come from, needs them.
	join := func(role string, host, dialers int) (*lab.Netns, string, error) {
		ns, err := lab.NewNetns(lab.NetnsName(role), dialers, 0)
		if err != nil {
			return nil, "", err
		}
		addr := fmt.Sprintf("%s.%d", lanNet, host)
		in, out := fmt.Sprintf("hb%d-%d", os.Getpid()%100000, host), fmt.Sprintf("sw%d-%d", os.Getpid()%100000, host)
		for _, step := range [][]string{
			{"", "link", "add", in, "netns", ns.Name, "type", "veth", "peer", "name", out, "netns", sw.Name},
			{sw.Name, "link", "set", out, "master", "br0"}, {sw.Name, "link", "set", out, "up"},
			{ns.Name, "addr", "add", addr + "/24", "dev", in}, {ns.Name, "link", "set", in, "up"},
		} {
			if err := ip(step[0], step[1:]...); err != nil {
				ns.Close()
				return nil, "", err
			}
		}
		return ns, addr, nil
	}
	var hubs []*lab.SSHServer
	var hubNS []*lab.Netns
	defer func() {
		for _, h := range hubs {
			if h != nil {
				h.Proc.Stop()
			}
		}
		for _, ns := range hubNS {
			ns.Close()
		}
	}()
	for i := range o.Hubs {
		dialers := 0
		if i == o.Hubs-1 {
			dialers = 32
		}
		ns, addr, err := join(fmt.Sprintf("hubs-h%d", i), i+1, dialers)
		if err != nil {
			return res, err
		}
		hubNS = append(hubNS, ns)
		listen := fmt.Sprintf("%s:%d", addr, sshPort)
		opts := lab.IoTsafeOpts{Forwards: 1, UserSpace: true, Netns: ns, SSHListen: listen,
			Pool: sockets.Config{CIDR: pool, SharedListeners: true}, Registry: dsn, HubName: fmt.Sprintf("hub%d", i), PeerAddress: listen}
		if i == 0 {
			opts.Sessions = o.Devices // the fleet is enrolled once, through the first hub
		}
		srv, err := b.StartIoTsafe(ctx, fmt.Sprintf("hub%d", i), opts)
		if err != nil {
			return res, fmt.Errorf("hub%d: %w", i, err)
		}
		hubs = append(hubs, srv)
	}
	first, last := hubs[0], hubs[len(hubs)-1]

	p.Step(fmt.Sprintf("%d agents", o.Devices))
	devNS, _, err := join("hubs-dev", 200, 0)
	if err != nil {
		return res, err
	}
	defer devNS.Close()
	app, err := lab.StartProc("app", nil, devNS.Exec(b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size))...)
	if err != nil {
		return res, err
	}
	defer app.Stop()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	line, err := app.ReadLine(rctx, "listening ")
	cancel()
	if err != nil {
		return res, fmt.Errorf("the device application: %w", err)
	}
	appAddr := strings.TrimPrefix(line, "listening ")
	var addrs, fps []string
	for _, h := range hubs {
		addrs, fps = append(addrs, h.Addr), append(fps, ssh.FingerprintSHA256(h.HostKey))
	}
	var agents []*lab.Proc
	defer func() {
		for _, a := range agents {
			a.Stop()
		}
	}()
	start := time.Now()
	for i := range o.Devices {
		name := lab.DeviceName("", i)
		a, err := lab.StartProc("agent-"+name, nil, devNS.Exec(b.Bin, "agent", "--hub", strings.Join(addrs, ","), "--hub-key", strings.Join(fps, ","),
			"--key", filepath.Join(first.KeyDir, name), "--expose", "f0="+appAddr, "--log-level", "warn")...)
		if err != nil {
			return res, err
		}
		agents = append(agents, a)
	}
	if err := waitOnline(ctx, first, o.Devices, o.Timeout); err != nil {
		return res, err
	}
	res.Up = time.Since(start)

	p.Step("every device through the last hub")
	byDevice, err := first.SocketsByDevice(ctx)
	if err != nil {
		return res, err
	}
	target := lab.Target{Name: "through a peer", Size: b.Size, Dial: last.NetnsDial()}
	var all []string
	for _, a := range byDevice {
		all = append(all, a...)
	}
	slices.Sort(all)
	ok, _, firstErr := lab.Sweep(ctx, target, all, 32)
	res.ThroughOK, res.ThroughN, res.ThroughErr = ok, len(all), firstErr

	p.Step(fmt.Sprintf("%d revocations written at the last hub", o.Revokes))
	revoked := map[string]bool{}
	for r := range min(o.Revokes, o.Devices-1) {
		name := lab.DeviceName("", o.Devices-1-r)
		t0 := time.Now()
		out, err := exec.CommandContext(ctx, b.Bin, "device", "revoke", name, "--reason", "bench", "--data", last.DataDir()).CombinedOutput()
		cmdTook := time.Since(t0)
		if err != nil {
			return res, fmt.Errorf("revoke %s: %v: %s", name, err, out)
		}
		if err := waitOffline(ctx, first, name, o.Timeout); err != nil {
			return res, err
		}
		res.Command, res.Revoke = append(res.Command, cmdTook), append(res.Revoke, time.Since(t0))
		revoked[name] = true
	}

	p.Step("the first hub killed: its devices back through the others")
	var remaining []string
	for name, a := range byDevice {
		if !revoked[name] {
			remaining = append(remaining, a...)
		}
	}
	first.Proc.Kill()
	killed := time.Now()
	hubs[0] = nil
	back, answered, firstErr := lab.UntilAll(ctx, target, remaining, 32, o.Timeout, killed)
	res.Recovery, res.Answered, res.Expected, res.RecoveryErr = back, answered, len(remaining), firstErr
	p.Done()
	return res, nil
}

func ip(ns string, args ...string) error {
	argv := args
	if ns != "" {
		argv = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", argv...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitOnline waits until hub has n devices online.
func waitOnline(ctx context.Context, hub *lab.SSHServer, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		info, err := hub.Status()
		if err == nil && info.Online >= n {
			return nil
		}
		if time.Now().After(deadline) {
			have := 0
			if info != nil {
				have = info.Online
			}
			return fmt.Errorf("%d of %d devices online at the first hub after %s", have, n, timeout)
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitOffline waits until device has no session at hub: how a revocation arrives.
func waitOffline(ctx context.Context, hub *lab.SSHServer, device string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		online, err := hub.OnlineDevices()
		if err == nil && !online[device] {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still online at the holding hub %s after its revocation", device, timeout)
		}
		if err := pause(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
