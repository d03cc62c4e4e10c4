package churnbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
)

// Options of a run.
type Options struct {
	Devices int // agent processes; 0 means 150, 5 with Quick
	// KillShare is the share of the fleet SIGKILLed and restarted every Every; 0 means
	// 0.1 (at least one agent).
	KillShare float64
	Every     time.Duration // 0 means 3 s, 1 s with Quick
	Duration  time.Duration // how long the churn lasts; 0 means 2 minutes, 5 s with Quick
	// Requesters are concurrent requests through the devices all along; 0 means 8.
	Requesters int
	// Timeout bounds each wait for agents to be ready; 0 means 2 minutes.
	Timeout  time.Duration
	Quick    bool
	Progress *lab.Progress
}

func (o *Options) defaults() {
	lab.Default(&o.Devices, o.Quick, 150, 5)
	lab.Default(&o.Requesters, o.Quick, 8, 2)
	if o.KillShare == 0 {
		o.KillShare = 0.1
	}
	lab.Default(&o.Every, o.Quick, 3*time.Second, time.Second)
	lab.Default(&o.Duration, o.Quick, 2*time.Minute, 5*time.Second)
	lab.Default(&o.Timeout, o.Quick, 2*time.Minute, 2*time.Minute)
}

// Footprint is the hub's memory, descriptors and goroutines at one moment, taken with
// the whole fleet connected and after a request through every device (so that each
// session's buffers, and each compressed session's deflate state, exist in both).
type Footprint struct {
	RSSKiB int64 `json:"rss_kib"`
	PSSKiB int64 `json:"pss_kib"`
	Files  int   `json:"open_files"`
	// From the hub's /metrics: Go's heap in use (garbage included), the heap live after
	// the last GC, and goroutines, which a leak moves where the process's pages (held
	// by Go after a peak) may not tell.
	HeapInuseKiB int64 `json:"heap_inuse_kib"`
	HeapLiveKiB  int64 `json:"heap_live_kib"`
	Goroutines   int64 `json:"goroutines"`
	// Panics the hub contained (iotsafe_panics_total, all components).
	Panics int64 `json:"panics_contained"`
}

// Kill is one agent killed and started again.
type Kill struct {
	Device string
	At     time.Duration // since the churn began
	// Back is from the new agent's start to its session being ready; -1 if it was not
	// ready within Options.Timeout.
	Back time.Duration
}

// Results of a run.
type Results struct {
	Options Options
	// Start is the hub with the whole fleet connected, before the churn; End after it,
	// with the whole fleet connected again.
	Start, End Footprint
	Kills      []Kill
	// Requests through the devices during the churn: answered with 200, and not (a
	// refused or cut connection: the device was being killed).
	Answered, Failed int64
	// HubAlive is false if the hub process died during the run.
	HubAlive bool
}

// agentKinds are how the fleet's agents carry connections, a third each: streams of
// one multiplexed channel (the default), one SSH channel per connection (as stock
// clients do: a refusal is a failed channel open), and the multiplexed channel
// compressed.
var agentKinds = [][]string{nil, {"--multiplex=false"}, {"--compress"}}

// agentProc is one device's agent process.
type agentProc struct {
	name string
	proc *lab.Proc
}

// Measure runs the experiment.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Options: o, HubAlive: true}
	p := o.Progress
	lab.RaiseFileLimit(p)
	rounds := int(o.Duration / o.Every)
	p.Start(2 + rounds)
	ho := lab.IoTsafeOpts{Sessions: o.Devices, Forwards: 1, Compression: true, Configure: func(c *hub.Config) {
		off := false
		c.Metrics.Listen, c.Metrics.PerDevice = "127.0.0.1:0", &off
	}}
	lh, err := b.EnrollIoTsafe(ctx, "churn-hub", ho)
	if err != nil {
		return res, fmt.Errorf("enrolling %d devices: %w", o.Devices, err)
	}
	srv, err := b.StartEnrolled(ctx, lh, ho)
	if err != nil {
		return res, err
	}
	defer func() { srv.Proc.Stop() }()
	app, err := startApp()
	if err != nil {
		return res, err
	}
	defer app.Close()

	start := func(i int) (*agentProc, error) {
		name := fmt.Sprintf("dev%d", i)
		// The agent logs JSON to standard error; the shell hands it to the lab's reader.
		argv := []string{"/bin/sh", "-c", `exec "$0" "$@" 2>&1`, b.Bin, "agent",
			"--hub", srv.Addr, "--key", filepath.Join(lh.Keys, name), "--hub-key", ssh.FingerprintSHA256(srv.HostKey),
			"--expose", "f0=" + app.Addr().String(), "--log-format", "json"}
		pr, err := lab.StartProc("agent-"+name, nil, append(argv, agentKinds[i%len(agentKinds)]...)...)
		if err != nil {
			return nil, err
		}
		return &agentProc{name: name, proc: pr}, nil
	}
	agents := make([]*agentProc, o.Devices)
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.proc.Kill()
			}
		}
	}()
	for i := range agents {
		if agents[i], err = start(i); err != nil {
			return res, err
		}
	}
	for _, a := range agents {
		if _, err := waitReady(ctx, a, o.Timeout); err != nil {
			return res, err
		}
	}
	sockets, err := srv.Sockets(ctx, o.Devices)
	if err != nil {
		return res, err
	}
	if res.Start, err = footprint(ctx, srv, sockets); err != nil {
		return res, err
	}
	p.Step(fmt.Sprintf("%d agents connected; hub %d KiB PSS, %d KiB heap, %d goroutines, %d descriptors",
		o.Devices, res.Start.PSSKiB, res.Start.HeapInuseKiB, res.Start.Goroutines, res.Start.Files))

	// Requests through every device all along the churn.
	stopLoad := make(chan struct{})
	var answered, failed atomic.Int64
	var load sync.WaitGroup
	for r := range o.Requesters {
		load.Add(1)
		go func() {
			defer load.Done()
			c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := r; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				resp, err := c.Get("http://" + sockets[i%len(sockets)] + "/")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err == nil && resp.StatusCode == 200 {
					answered.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}

	rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
	perRound := max(1, int(o.KillShare*float64(o.Devices)+0.5))
	began := time.Now()
	var mu sync.Mutex
	var waits sync.WaitGroup
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	// stop ends the load and the waits for restarted agents (killing the agents ends a
	// wait at once), so that nothing writes the results after Measure returns.
	stop := func(killAgents bool) {
		close(stopLoad)
		load.Wait()
		if killAgents {
			for _, a := range agents {
				a.proc.Kill()
			}
		}
		waits.Wait()
		res.Answered, res.Failed = answered.Load(), failed.Load()
	}
	for round := 1; round <= rounds; round++ {
		for _, i := range rng.Perm(o.Devices)[:perRound] {
			old := agents[i]
			old.proc.Kill()
			a, err := start(i)
			if err != nil {
				agents[i] = old // killed already; Kill again is harmless
				stop(true)
				return res, err
			}
			agents[i] = a
			k := Kill{Device: a.name, At: time.Since(began)}
			waits.Add(1)
			go func() {
				defer waits.Done()
				back, _ := waitReady(ctx, a, o.Timeout)
				k.Back = back
				mu.Lock()
				res.Kills = append(res.Kills, k)
				mu.Unlock()
			}()
		}
		select {
		case <-srv.Proc.Exited():
			res.HubAlive = false
			stop(true)
			return res, fmt.Errorf("the hub died during the churn (round %d); the end of its log:\n%s", round, srv.Proc.StderrTail())
		case <-ctx.Done():
			stop(true)
			return res, ctx.Err()
		case <-tick.C:
		}
		p.Step(fmt.Sprintf("round %d/%d: %d agents killed and restarted; %d requests answered, %d not", round, rounds, perRound, answered.Load(), failed.Load()))
	}
	stop(false)
	select {
	case <-srv.Proc.Exited():
		res.HubAlive = false
		return res, fmt.Errorf("the hub died during the churn; the end of its log:\n%s", srv.Proc.StderrTail())
	default:
	}
	if res.End, err = footprint(ctx, srv, sockets); err != nil {
		return res, err
	}
	p.Done()
	return res, nil
}

// waitReady waits for the agent's "session up" record and returns the time from now.
// It is -1 with an error when the agent was not ready in time or exited.
func waitReady(ctx context.Context, a *agentProc, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := a.proc.ReadLineFunc(ctx, `"session up"`, func(l string) bool {
		var rec struct {
			Msg string `json:"msg"`
		}
		return json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "session up"
	})
	if err != nil {
		return -1, err
	}
	return time.Since(start), nil
}

// footprint reads the hub's memory, descriptors and metrics after one request through
// every device.
func footprint(ctx context.Context, srv *lab.SSHServer, sockets []string) (Footprint, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, s := range sockets {
		resp, err := c.Get("http://" + s + "/")
		if err != nil {
			return Footprint{}, fmt.Errorf("warming %s: %w", s, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var f Footprint
	m, err := lab.TreeMemory(srv.Proc.PID())
	if err != nil {
		return f, err
	}
	f.RSSKiB, f.PSSKiB = m.RSS, m.PSS // smaps_rollup counts kB
	if f.Files, err = lab.OpenFiles(srv.Proc.PID()); err != nil {
		return f, err
	}
	series, err := scrape(ctx, c, srv.MetricsURL)
	if err != nil {
		return f, err
	}
	f.HeapInuseKiB, f.HeapLiveKiB = int64(series["go_memstats_heap_inuse_bytes"])>>10, int64(series["go_gc_heap_live_bytes"])>>10
	f.Goroutines, f.Panics = int64(series["go_goroutines"]), int64(series["iotsafe_panics_total"])
	return f, nil
}

// scrape reads the hub's /metrics: each series' value by name, summed over labels.
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	if url == "" {
		return nil, fmt.Errorf("the hub serves no /metrics")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			_, rest, ok = strings.Cut(line[strings.IndexByte(line, '}'):], " ")
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); ok && err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// startApp is every device's application: one HTTP server on loopback.
func startApp() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return ln, nil
}
