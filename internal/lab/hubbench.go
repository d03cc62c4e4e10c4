package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"
)

// HubOptions configures 'iotsafe bench hub'.
type HubOptions struct {
	Quick       bool
	Only        map[string]bool // "rps", "ram"; empty means all
	Concurrency int             // load generator workers; 0 means 32
	Reps        int             // repetitions per RPS path; 0 means 5 (1 with Quick)
	Warmup      time.Duration   // excluded from each run; 0 means 1s (0.5s with Quick)
	Duration    time.Duration   // measured part of each run; 0 means 5s (2s with Quick)
	RAMSizes    []int           // N for the memory scenario; nil means 100, 1000 (20 with Quick)
	// Fig. 17: Active active forwards in one session plus each K of InactiveK inactive ones.
	Active    int
	InactiveK []int
	// Fig. 19: Total forwards spread over each S of PSSessions sessions.
	Total      int
	PSSessions []int
	// BatchConcurrency bounds the parallel requests of one timed batch; 0 means 256.
	BatchConcurrency int
	// Servers limits the ram, inactive and ps parts to these SSH servers (iotsafe, openssh,
	// dropbear); empty means all. 10,000 OpenSSH sessions need about 16 GB.
	Servers map[string]bool
	// Paths limits the rps part to these paths (RPSPaths); empty means all.
	Paths map[string]bool
	// Payloads are the response sizes of the memory-vs-payload sweep (figs. 15/16 against
	// payload), at PayloadN device sessions; nil means 1K..256K (1K and 64K with Quick).
	Payloads []int
	PayloadN int
	Progress *Progress
}

func (o *HubOptions) defaults() {
	def := func(d *time.Duration, full, quick time.Duration) {
		if *d == 0 {
			*d = full
			if o.Quick {
				*d = quick
			}
		}
	}
	def(&o.Warmup, time.Second, 500*time.Millisecond)
	def(&o.Duration, 5*time.Second, 2*time.Second)
	if o.Concurrency == 0 {
		o.Concurrency = 32
	}
	if o.Reps == 0 {
		o.Reps = 5
		if o.Quick {
			o.Reps = 1
		}
	}
	if o.RAMSizes == nil {
		o.RAMSizes = []int{100, 1000}
		if o.Quick {
			o.RAMSizes = []int{20}
		}
	}
	if o.Active == 0 {
		o.Active = 1000
		if o.Quick {
			o.Active = 50
		}
	}
	if o.InactiveK == nil {
		o.InactiveK = []int{0, 2000, 4000, 8000}
		if o.Quick {
			o.InactiveK = []int{0, 200}
		}
	}
	if o.Total == 0 {
		o.Total = 2000
		if o.Quick {
			o.Total = 100
		}
	}
	if o.PSSessions == nil {
		o.PSSessions = []int{1, 10, 100, 1000, 2000}
		if o.Quick {
			o.PSSessions = []int{1, 10, 100}
		}
	}
	if o.BatchConcurrency == 0 {
		o.BatchConcurrency = 256
	}
	if o.Payloads == nil {
		o.Payloads = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10}
		if o.Quick {
			o.Payloads = []int{1 << 10, 64 << 10}
		}
	}
	if o.PayloadN == 0 {
		o.PayloadN = 100
		if o.Quick {
			o.PayloadN = 10
		}
	}
}

// sshServers are the SSH servers of the ram, inactive and ps parts.
var sshServers = []string{"iotsafe", "openssh", "dropbear"}

func (o *HubOptions) server(name string) bool { return len(o.Servers) == 0 || o.Servers[name] }

// nServers is how many SSH servers the selection runs.
func (o *HubOptions) nServers() int {
	n := 0
	for _, s := range sshServers {
		if o.server(s) {
			n++
		}
	}
	return n
}

// rpsPaths are the selected rps paths, in report order.
func (o *HubOptions) rpsPaths() []string {
	var ps []string
	for _, p := range RPSPaths {
		if len(o.Paths) == 0 || o.Paths[p] {
			ps = append(ps, p)
		}
	}
	return ps
}

func (o *HubOptions) want(s string) bool { return len(o.Only) == 0 || o.Only[s] }

// RPSPaths are the paths of the rps part, in report order.
var RPSPaths = []string{"plain", "iotsafe", "iotsafe_mux", "iotsafe_acl_off", "iotsafe_layers_on", "iotsafe_layers_off", "openssh", "dropbear", "https_go", "https2", "https_caddy",
	"frontdoor", "frontdoor_ka", "https_go_ka"}

// labUID is the uid the load generator takes for the namespace paths: a platform user
// holding a grant, so both access layers do their full check.
const labUID = 40123

// RPSRow is one measured run.
type RPSRow struct {
	Path   string
	Rep    int
	Result LoadResult
	// ServerCPU is the CPU time the server under test (its whole process tree) spent
	// during the measured part; 0 if unknown.
	ServerCPU time.Duration
}

// RAMRow is one memory reading of a server's process tree.
type RAMRow struct {
	Server  string
	Mode    string // "sessions": S=N,P=1; "forwards": S=1,P=N; "payload": S=N,P=1 at Payload bytes
	N       int
	Payload int    // response bytes of the "during" phase
	Phase   string // before, established, during
	Mem     Memory
	// Served and Failed count the requests of the "during" phase: one through every forward.
	Served, Failed int
}

// HubResults is everything one run measured.
type HubResults struct {
	RPS     []RPSRow
	RAM     []RAMRow
	Sweeps  []SweepRow
	Skipped map[string]string // path or server -> why
}

// RunHub runs the host-server benchmark of paper 000 section VII.
func RunHub(ctx context.Context, b *Bench, o HubOptions) (*HubResults, error) {
	o.defaults()
	res := &HubResults{Skipped: map[string]string{}}
	steps := 0
	if o.want("rps") {
		steps += o.Reps * len(o.rpsPaths())
	}
	if o.want("ram") {
		steps += o.nServers() * (2*len(o.RAMSizes) + len(o.Payloads))
	}
	if o.want("inactive") {
		steps += o.nServers() * len(o.InactiveK)
	}
	if o.want("ps") {
		steps += o.nServers() * len(o.PSSessions)
	}
	raiseFileLimit(o.Progress)
	o.Progress.Start(steps)
	defer o.Progress.Done()
	if o.want("rps") {
		if err := runRPS(ctx, b, &o, res); err != nil {
			return res, err
		}
	}
	if !o.want("ram") && !o.want("inactive") && !o.want("ps") {
		return res, nil
	}
	app, err := StartProc("app", nil, b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size))
	if err != nil {
		return res, err
	}
	defer app.Stop()
	appAddr, err := app.ReadLine(ctx, "listening ")
	if err != nil {
		return res, err
	}
	if o.want("ram") {
		if err := runRAM(ctx, b, &o, res, appAddr); err != nil {
			return res, err
		}
	}
	if o.want("inactive") {
		runInactive(ctx, b, &o, res, appAddr)
	}
	if o.want("ps") {
		runPS(ctx, b, &o, res, appAddr)
	}
	return res, ctx.Err()
}

func runRPS(ctx context.Context, b *Bench, o *HubOptions, res *HubResults) error {
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	app, err := StartProc("app", nil, b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size))
	if err != nil {
		return err
	}
	stops = append(stops, app.Stop)
	appAddr, err := app.ReadLine(ctx, "listening ")
	if err != nil {
		return err
	}
	targets := map[string]Target{"plain": {Name: "plain", Addrs: []string{appAddr}, Size: b.Size}}
	// servers maps each path to the process whose CPU time is the path's cost.
	servers := map[string]*Proc{"plain": app}

	sshTarget := func(name string, start func() (*SSHServer, error)) {
		s, err := start()
		if err != nil {
			res.Skipped[name] = err.Error()
			return
		}
		stops = append(stops, s.Proc.Stop)
		fleet, addrs, err := b.StartFleet(ctx, s, appAddr, 1, 1)
		if err != nil {
			res.Skipped[name] = err.Error()
			return
		}
		stops = append(stops, fleet.Stop)
		targets[name] = Target{Name: name, Addrs: addrs, Size: b.Size}
		servers[name] = s.Proc
	}
	sshTarget("iotsafe", func() (*SSHServer, error) {
		return b.StartIoTsafe(ctx, "iotsafe", IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true})
	})
	// The same hub with the device's forwards multiplexed in one channel (agent
	// --multiplex): no channel open round trip or close messages per connection.
	sshTarget("iotsafe_mux", func() (*SSHServer, error) {
		s, err := b.StartIoTsafe(ctx, "iotsafe_mux", IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true})
		if s != nil {
			s.Multiplex = true
		}
		return s, err
	})
	sshTarget("iotsafe_acl_off", func() (*SSHServer, error) {
		return b.StartIoTsafe(ctx, "iotsafe_acl_off", IoTsafeOpts{Sessions: 1, Forwards: 1})
	})
	// Both access layers on, against both off, in a namespace of the lab's: the kernel
	// layer's table lives there, never in the host's ruleset.
	if ns, err := NewNetns(fmt.Sprintf("iotsafe-bench-%d", os.Getpid()), o.Concurrency, labUID); err != nil {
		res.Skipped["iotsafe_layers_on"] = err.Error()
		res.Skipped["iotsafe_layers_off"] = err.Error()
	} else {
		stops = append(stops, ns.Close)
		nsApp, err := StartProc("app-ns", nil, ns.Exec(b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size))...)
		if err != nil {
			return err
		}
		stops = append(stops, nsApp.Stop)
		nsAppAddr, err := nsApp.ReadLine(ctx, "listening ")
		if err != nil {
			return err
		}
		for _, v := range []struct {
			name string
			on   bool
		}{{"iotsafe_layers_on", true}, {"iotsafe_layers_off", false}} {
			s, err := b.StartIoTsafe(ctx, v.name, IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: v.on, Kernel: v.on, Netns: ns, GrantUID: labUID})
			if err != nil {
				res.Skipped[v.name] = err.Error()
				continue
			}
			stops = append(stops, s.Proc.Stop)
			fleet, addrs, err := b.StartFleet(ctx, s, nsAppAddr, 1, 1)
			if err != nil {
				res.Skipped[v.name] = err.Error()
				continue
			}
			stops = append(stops, fleet.Stop)
			targets[v.name] = Target{Name: v.name, Addrs: addrs, Size: b.Size, Dial: ns.Dial}
			servers[v.name] = s.Proc
		}
	}
	// People through the front door (issue: TesPX): TLS to the hub, a token, the grant
	// check, then the same protected socket and SSH forward as the iotsafe path.
	if err := frontdoorTargets(ctx, b, appAddr, targets, servers, &stops); err != nil {
		res.Skipped["frontdoor"], res.Skipped["frontdoor_ka"] = err.Error(), err.Error()
	}
	sshTarget("openssh", func() (*SSHServer, error) { return b.StartOpenSSH(ctx) })
	sshTarget("dropbear", func() (*SSHServer, error) { return b.StartDropbear(ctx) })

	certFile, keyFile, clientTLS, err := WriteCert(b.Dir)
	if err != nil {
		return err
	}
	httpsProc, err := StartProc("https_go", nil, b.Bin, "bench", "serve-https", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size), "--cert", certFile, "--key", keyFile)
	if err != nil {
		return err
	}
	stops = append(stops, httpsProc.Stop)
	httpsAddr, err := httpsProc.ReadLine(ctx, "listening ")
	if err != nil {
		return err
	}
	targets["https_go"] = Target{Name: "https_go", Addrs: []string{httpsAddr}, TLS: clientTLS, Size: b.Size}
	targets["https_go_ka"] = Target{Name: "https_go_ka", Addrs: []string{httpsAddr}, TLS: clientTLS, Size: b.Size, KeepAlive: true}
	servers["https_go_ka"] = httpsProc
	targets["https2"] = NewH2Target("https2", []string{httpsAddr}, clientTLS, b.Size)
	servers["https_go"], servers["https2"] = httpsProc, httpsProc
	if caddy, addr, err := b.StartCaddy(ctx, certFile, keyFile); err != nil {
		res.Skipped["https_caddy"] = err.Error()
	} else {
		stops = append(stops, caddy.Stop)
		targets["https_caddy"] = Target{Name: "https_caddy", Addrs: []string{addr}, TLS: clientTLS, Size: b.Size}
		servers["https_caddy"] = caddy
	}
	// Sanity: one request per path before measuring, so a broken path fails loudly.
	for _, p := range o.rpsPaths() {
		t, ok := targets[p]
		if !ok {
			continue
		}
		if err := Request(ctx, t, t.Addrs[0]); err != nil {
			res.Skipped[p] = "first request failed: " + err.Error()
			delete(targets, p)
		}
	}
	// Repetitions interleave the paths so slow drifts of a shared machine hit all alike.
	for rep := 1; rep <= o.Reps; rep++ {
		for _, p := range o.rpsPaths() {
			t, ok := targets[p]
			if !ok {
				o.Progress.Step(fmt.Sprintf("rps %s skipped", p))
				continue
			}
			var cpu time.Duration
			r := Load(ctx, t, o.Concurrency, o.Warmup, o.Duration, func(measuring bool) {
				// Server CPU over exactly the measured part.
				if c, err := TreeCPU(servers[p].PID()); err == nil {
					if measuring {
						cpu = -c
					} else {
						cpu += c
					}
				}
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.RPS = append(res.RPS, RPSRow{Path: p, Rep: rep, Result: r, ServerCPU: cpu})
			o.Progress.Step(fmt.Sprintf("rps %-16s rep %d: %8.0f req/s, %d errors", p, rep, r.RPS(), r.Errors))
		}
	}
	return nil
}

func frontdoorTargets(ctx context.Context, b *Bench, appAddr string, targets map[string]Target, servers map[string]*Proc, stops *[]func()) error {
	s, err := b.StartIoTsafe(ctx, "iotsafe_frontdoor", IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true, Frontdoor: true})
	if err != nil {
		return err
	}
	*stops = append(*stops, s.Proc.Stop)
	fleet, _, err := b.StartFleet(ctx, s, appAddr, 1, 1)
	if err != nil {
		return err
	}
	*stops = append(*stops, fleet.Stop)
	host := "f0.dev0." + FrontdoorDomain
	tc := &tls.Config{RootCAs: s.Front.CA, ServerName: host}
	for _, ka := range []bool{false, true} {
		name := "frontdoor"
		if ka {
			name = "frontdoor_ka"
		}
		targets[name] = Target{Name: name, Addrs: []string{s.Front.Addr}, TLS: tc, Size: b.Size, KeepAlive: ka,
			Host: host, Header: "Authorization: Bearer " + s.Front.Token + "\r\n"}
		servers[name] = s.Proc
	}
	return nil
}

func runRAM(ctx context.Context, b *Bench, o *HubOptions, res *HubResults, appAddr string) error {
	for _, server := range sshServers {
		if !o.server(server) {
			continue
		}
		for _, mode := range []string{"sessions", "forwards"} {
			for _, n := range o.RAMSizes {
				if err := ramOne(ctx, b, o, res, appAddr, server, mode, n, b.Size); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					res.Skipped[fmt.Sprintf("ram %s %s N=%d", server, mode, n)] = err.Error()
				}
				o.Progress.Step(fmt.Sprintf("ram %-8s %-8s N=%d", server, mode, n))
			}
		}
		// Memory against payload size: one application per size.
		for _, size := range o.Payloads {
			err := func() error {
				app, err := StartProc("app-payload", nil, b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(size))
				if err != nil {
					return err
				}
				defer app.Stop()
				addr, err := app.ReadLine(ctx, "listening ")
				if err != nil {
					return err
				}
				return ramOne(ctx, b, o, res, addr, server, "payload", o.PayloadN, size)
			}()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				res.Skipped[fmt.Sprintf("ram %s payload %d", server, size)] = err.Error()
			}
			o.Progress.Step(fmt.Sprintf("ram %-8s payload %d B, N=%d", server, size, o.PayloadN))
		}
	}
	return nil
}

func ramOne(ctx context.Context, b *Bench, o *HubOptions, res *HubResults, appAddr, server, mode string, n, size int) error {
	s, p := n, 1
	if mode == "forwards" {
		s, p = 1, n
	}
	srv, err := b.startSSH(ctx, server, fmt.Sprintf("ram-%s-%s-%d-%d", server, mode, n, size), s, p)
	if err != nil {
		return err
	}
	defer srv.Proc.Stop()
	record := func(phase string, m Memory, served, failed int) {
		res.RAM = append(res.RAM, RAMRow{Server: server, Mode: mode, N: n, Payload: size, Phase: phase, Mem: m, Served: served, Failed: failed})
	}
	before, err := TreeMemory(srv.Proc.PID())
	if err != nil {
		return err
	}
	record("before", before, 0, 0)
	fleet, addrs, err := b.StartFleet(ctx, srv, appAddr, s, p)
	if err != nil {
		return err
	}
	defer fleet.Stop()
	est, err := TreeMemory(srv.Proc.PID())
	if err != nil {
		return err
	}
	record("established", est, 0, 0)
	// During: one request through every forward, up to 512 at once; the peak of the
	// memory samples is recorded, and how many forwards served.
	peak := est
	type batchResult struct{ failed int }
	done := make(chan batchResult)
	go func() {
		_, failed, _ := Batch(ctx, addrs, size, min(len(addrs), 512))
		done <- batchResult{failed}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	var br batchResult
sample:
	for {
		select {
		case br = <-done:
			break sample
		case <-tick.C:
			if m, err := TreeMemory(srv.Proc.PID()); err == nil && m.PSS > peak.PSS {
				peak = m
			}
		}
	}
	tick.Stop()
	// A short batch can end between two samples; the memory it used is still held now.
	if m, err := TreeMemory(srv.Proc.PID()); err == nil && m.PSS > peak.PSS {
		peak = m
	}
	record("during", peak, len(addrs)-br.failed, br.failed)
	if br.failed == len(addrs) {
		return fmt.Errorf("no request succeeded through %d forwards", len(addrs))
	}
	return nil
}

// MedianCPU returns the median server CPU microseconds per request of path.
func (r *HubResults) MedianCPU(path string) (float64, bool) {
	var v []float64
	for _, row := range r.RPS {
		if row.Path == path && row.ServerCPU > 0 && row.Result.Requests > 0 {
			v = append(v, float64(row.ServerCPU.Microseconds())/float64(row.Result.Requests))
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	return v[len(v)/2], true
}

// Median returns the median RPS of path, and how many runs it had.
func (r *HubResults) Median(path string) (float64, int) {
	var v []float64
	for _, row := range r.RPS {
		if row.Path == path {
			v = append(v, row.Result.RPS())
		}
	}
	if len(v) == 0 {
		return 0, 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], len(v)
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, len(v)
}

// PerUnitKB returns the PSS growth per session (mode "sessions") or per forward
// ("forwards") from before to the phase, at the largest N measured.
func (r *HubResults) PerUnitKB(server, mode, phase string) (float64, int) {
	kb, n, _ := r.perUnit(func(row RAMRow) bool { return row.Server == server && row.Mode == mode }, phase)
	return kb, n
}

// PayloadKB is PerUnitKB of the busy phase of the payload sweep at size bytes.
func (r *HubResults) PayloadKB(server string, size int) (float64, int) {
	kb, n, _ := r.perUnit(func(row RAMRow) bool { return row.Server == server && row.Mode == "payload" && row.Payload == size }, "during")
	return kb, n
}

// Served returns how many forwards served a request in the busy phase at the largest N
// of server/mode, and that N.
func (r *HubResults) Served(server, mode string) (served, n int) {
	_, n, row := r.perUnit(func(row RAMRow) bool { return row.Server == server && row.Mode == mode }, "during")
	return row.Served, n
}

// perUnit finds the largest N among rows that match, and returns the PSS growth per
// unit from "before" to phase, N, and the phase's row.
func (r *HubResults) perUnit(match func(RAMRow) bool, phase string) (float64, int, RAMRow) {
	var ns []int
	for _, row := range r.RAM {
		if match(row) && !slices.Contains(ns, row.N) {
			ns = append(ns, row.N)
		}
	}
	if len(ns) == 0 {
		return 0, 0, RAMRow{}
	}
	n := slices.Max(ns)
	var before int64 = -1
	var at *RAMRow
	for i, row := range r.RAM {
		if match(row) && row.N == n {
			switch row.Phase {
			case "before":
				before = row.Mem.PSS
			case phase:
				at = &r.RAM[i]
			}
		}
	}
	if before < 0 || at == nil {
		return 0, 0, RAMRow{}
	}
	return float64(at.Mem.PSS-before) / float64(n), n, *at
}

// Progress reports long runs on a terminal (a bar) or a log (a line per step).
type Progress struct {
	W     io.Writer
	TTY   bool
	total int
	done  int
	start time.Time
}

func (p *Progress) Start(total int) {
	if p == nil {
		return
	}
	p.total, p.done, p.start = total, 0, time.Now()
}

func (p *Progress) Step(msg string) {
	if p == nil || p.W == nil {
		return
	}
	p.done++
	if p.TTY {
		const width = 30
		fill := width * p.done / max(p.total, 1)
		fmt.Fprintf(p.W, "\r\033[K[%s%s] %d/%d %s  %s", bar(fill, '#'), bar(width-fill, '.'), p.done, p.total, time.Since(p.start).Round(time.Second), msg)
		return
	}
	fmt.Fprintf(p.W, "[%d/%d %s] %s\n", p.done, p.total, time.Since(p.start).Round(time.Second), msg)
}

// Note prints a line that is not a step (on a terminal, above the bar).
func (p *Progress) Note(msg string) {
	if p == nil || p.W == nil {
		return
	}
	if p.TTY {
		fmt.Fprint(p.W, "\r\033[K")
	}
	fmt.Fprintln(p.W, msg)
}

func (p *Progress) Done() {
	if p != nil && p.TTY && p.W != nil {
		fmt.Fprintln(p.W)
	}
}

func bar(n int, c byte) string {
	b := make([]byte, max(n, 0))
	for i := range b {
		b[i] = c
	}
	return string(b)
}
