package hubbench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sort"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Options configures 'iotsafe bench hub'.
type Options struct {
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
	// BulkSize is the answer of the bulk part, in bytes; 0 means 128 MiB (4 MiB with Quick).
	BulkSize int
	Progress *lab.Progress
}

func (o *Options) defaults() {
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
	if o.BulkSize == 0 {
		o.BulkSize = 128 << 20
		if o.Quick {
			o.BulkSize = 4 << 20
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

func (o *Options) server(name string) bool { return len(o.Servers) == 0 || o.Servers[name] }

// nServers is how many SSH servers the selection runs.
func (o *Options) nServers() int {
	n := 0
	for _, s := range sshServers {
		if o.server(s) {
			n++
		}
	}
	return n
}

// rpsPaths are the selected rps paths, in report order.
func (o *Options) rpsPaths() []string {
	var ps []string
	for _, p := range RPSPaths {
		if len(o.Paths) == 0 || o.Paths[p] {
			ps = append(ps, p)
		}
	}
	return ps
}

// measures reports whether any of paths is selected; runRPS starts only the servers
// that selected paths need.
func (o *Options) measures(paths ...string) bool {
	for _, p := range paths {
		if len(o.Paths) == 0 || o.Paths[p] {
			return true
		}
	}
	return false
}

func (o *Options) want(s string) bool { return len(o.Only) == 0 || o.Only[s] }

// RPSPaths are the paths of the rps part, in report order.
var RPSPaths = []string{"plain", "iotsafe", "iotsafe_channels", "iotsafe_acl_off", "iotsafe_layers_on", "iotsafe_layers_off", "openssh", "dropbear", "https_go", "https2", "https_caddy",
	"frontdoor", "frontdoor_ka", "https_go_ka"}

// labUID is the uid the load generator takes for the namespace paths: a platform user
// holding a grant, so both access layers do their full check.
const labUID = 40123

// RPSRow is one measured run.
type RPSRow struct {
	Path   string
	Rep    int
	Result lab.LoadResult
	// ServerCPU is the CPU time the server under test (its whole process tree) spent
	// during the measured part; 0 if unknown.
	ServerCPU time.Duration
	// DeviceCPU is the same for the device side (the fleet) of SSH paths; 0 otherwise.
	DeviceCPU time.Duration
}

// RAMRow is one memory reading of a server's process tree.
type RAMRow struct {
	Server  string
	Mode    string // "sessions": S=N,P=1; "forwards": S=1,P=N; "payload": S=N,P=1 at Payload bytes
	N       int
	Payload int    // response bytes of the "during" phase
	Phase   string // before, established, during
	Mem     lab.Memory
	// Served and Failed count the requests of the "during" phase: one through every forward.
	Served, Failed int
}

// Results is everything one run measured.
type Results struct {
	RPS     []RPSRow
	Bulk    []BulkRow
	RAM     []RAMRow
	Sweeps  []SweepRow
	Skipped map[string]string // path or server -> why
}

// Measure runs the host-server benchmark of paper 000 section VII.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Skipped: map[string]string{}}
	steps := 0
	if o.want("rps") {
		steps += o.Reps * len(o.rpsPaths())
	}
	if o.want("bulk") {
		steps += o.Reps * len(o.bulkPaths())
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
	lab.RaiseFileLimit(o.Progress)
	o.Progress.Start(steps)
	defer o.Progress.Done()
	if o.want("rps") {
		if err := runRPS(ctx, b, &o, res); err != nil {
			return res, err
		}
	}
	if o.want("bulk") {
		if err := runBulk(ctx, b, &o, res); err != nil {
			return res, err
		}
	}
	if !o.want("ram") && !o.want("inactive") && !o.want("ps") {
		return res, nil
	}
	app, err := lab.StartProc("app", nil, b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size))
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

// rpsRun holds what runRPS started: a target per path, the process whose CPU time is the
// path's server cost, and (for SSH paths) the device side's fleet.
type rpsRun struct {
	ctx     context.Context
	b       *lab.Bench
	o       *Options
	res     *Results
	stops   []func()
	targets map[string]lab.Target
	servers map[string]*lab.Proc
	devices map[string]*lab.Proc
}

func (r *rpsRun) stop() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

// skip records why paths cannot be measured.
func (r *rpsRun) skip(err error, paths ...string) {
	for _, p := range paths {
		r.res.Skipped[p] = err.Error()
	}
}

// app starts the device application, in ns if set, and returns its address.
func (r *rpsRun) app(name string, ns *lab.Netns) (*lab.Proc, string, error) {
	return r.appSized(name, ns, r.b.Size)
}

// appSized is app answering size bytes.
func (r *rpsRun) appSized(name string, ns *lab.Netns, size int) (*lab.Proc, string, error) {
	argv := append([]string{r.b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(size)}, r.b.ProfileArgs(name)...)
	if ns != nil {
		argv = ns.Exec(argv...)
	}
	p, err := lab.StartProc(name, nil, argv...)
	if err != nil {
		return nil, "", err
	}
	r.stops = append(r.stops, p.Stop)
	addr, err := p.ReadLine(r.ctx, "listening ")
	return p, addr, err
}

// ssh starts an SSH server for path name with its one-session, one-forward fleet
// towards appAddr; a failure skips the path.
func (r *rpsRun) ssh(name, appAddr string, dial func(context.Context, string) (net.Conn, error), start func() (*lab.SSHServer, error)) {
	if !r.o.measures(name) {
		return
	}
	s, err := start()
	if err != nil {
		r.skip(err, name)
		return
	}
	r.stops = append(r.stops, s.Proc.Stop)
	fleet, addrs, err := r.b.StartFleet(r.ctx, s, appAddr, 1, 1)
	if err != nil {
		r.skip(err, name)
		return
	}
	r.stops = append(r.stops, fleet.Stop)
	r.targets[name] = lab.Target{Name: name, Addrs: addrs, Size: r.b.Size, Dial: dial}
	r.servers[name], r.devices[name] = s.Proc, fleet
}

func runRPS(ctx context.Context, b *lab.Bench, o *Options, res *Results) error {
	r := &rpsRun{ctx: ctx, b: b, o: o, res: res,
		targets: map[string]lab.Target{}, servers: map[string]*lab.Proc{}, devices: map[string]*lab.Proc{}}
	defer r.stop()
	app, appAddr, err := r.app("app", nil)
	if err != nil {
		return err
	}
	r.targets["plain"] = lab.Target{Name: "plain", Addrs: []string{appAddr}, Size: b.Size}
	r.servers["plain"] = app

	perDevice := rpsMaxChannels(o)
	iotsafe := r.iotsafe
	// The device side as the agent runs by default: its connections multiplexed in one
	// channel.
	r.ssh("iotsafe", appAddr, nil, iotsafe("iotsafe", lab.IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true, MaxChannels: perDevice}, false))
	// The same hub with one SSH channel per connection, as stock clients (and the agent
	// with --multiplex=false) do: a channel open round trip and close messages each.
	r.ssh("iotsafe_channels", appAddr, nil, iotsafe("iotsafe_channels", lab.IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true, MaxChannels: perDevice}, true))
	r.ssh("iotsafe_acl_off", appAddr, nil, iotsafe("iotsafe_acl_off", lab.IoTsafeOpts{Sessions: 1, Forwards: 1, MaxChannels: perDevice}, false))
	if o.measures("iotsafe_layers_on", "iotsafe_layers_off") {
		if err := r.layers(); err != nil {
			return err
		}
	}
	// People through the front door (issue: TesPX): TLS to the hub, a token, the grant
	// check, then the same protected socket and SSH forward as the iotsafe path.
	if o.measures("frontdoor", "frontdoor_ka") {
		if err := frontdoorTargets(ctx, b, perDevice, appAddr, r.targets, r.servers, &r.stops); err != nil {
			r.skip(err, "frontdoor", "frontdoor_ka")
		}
	}
	r.ssh("openssh", appAddr, nil, func() (*lab.SSHServer, error) { return b.StartOpenSSH(ctx) })
	r.ssh("dropbear", appAddr, nil, func() (*lab.SSHServer, error) { return b.StartDropbear(ctx) })
	if o.measures("https_go", "https_go_ka", "https2", "https_caddy") {
		if err := r.https(); err != nil {
			return err
		}
	}
	// Sanity: one request per path before measuring, so a broken path fails loudly.
	for _, p := range o.rpsPaths() {
		t, ok := r.targets[p]
		if !ok {
			continue
		}
		if err := lab.Request(ctx, t, t.Addrs[0]); err != nil {
			res.Skipped[p] = "first request failed: " + err.Error()
			delete(r.targets, p)
		}
	}
	// Repetitions interleave the paths so slow drifts of a shared machine hit all alike.
	for rep := 1; rep <= o.Reps; rep++ {
		for _, p := range o.rpsPaths() {
			t, ok := r.targets[p]
			if !ok {
				o.Progress.Step(fmt.Sprintf("rps %s skipped", p))
				continue
			}
			var server, device cpuWindow
			l := lab.Load(ctx, t, o.Concurrency, o.Warmup, o.Duration, func(measuring bool) {
				// CPU over exactly the measured part.
				server.mark(r.servers[p], measuring)
				device.mark(r.devices[p], measuring)
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.RPS = append(res.RPS, RPSRow{Path: p, Rep: rep, Result: l, ServerCPU: server.d, DeviceCPU: device.d})
			o.Progress.Step(fmt.Sprintf("rps %-16s rep %d: %8.0f req/s, %d errors", p, rep, l.RPS(), l.Errors))
		}
	}
	return nil
}

// iotsafe returns a starter of an iotsafe hub for path name; channels makes its device
// side open one SSH channel per connection instead of multiplexing them in one.
func (r *rpsRun) iotsafe(name string, opts lab.IoTsafeOpts, channels bool) func() (*lab.SSHServer, error) {
	return func() (*lab.SSHServer, error) {
		s, err := r.b.StartIoTsafe(r.ctx, name, opts)
		if s != nil {
			s.ChannelPerConnection = channels
		}
		return s, err
	}
}

// rpsMaxChannels is the lab device's connection limit for the rps part: one device
// serves all of the load generator's clients at once.
func rpsMaxChannels(o *Options) int { return 2*o.Concurrency + 64 }

// cpuWindow is the CPU time a process tree spent between two marks; 0 if unknown.
type cpuWindow struct{ d time.Duration }

func (w *cpuWindow) mark(p *lab.Proc, start bool) {
	if p == nil {
		return
	}
	c, err := lab.TreeCPU(p.PID())
	switch {
	case err != nil:
		w.d = 0
	case start:
		w.d = -c
	default:
		w.d += c
	}
}

// layers measures both access layers on against both off, in a namespace of the lab's:
// the kernel layer's table lives there, never in the host's ruleset.
func (r *rpsRun) layers() error {
	names := []string{"iotsafe_layers_on", "iotsafe_layers_off"}
	ns, err := lab.NewNetns(lab.NetnsName("bench"), r.o.Concurrency, labUID)
	if err != nil {
		r.skip(err, names...)
		return nil
	}
	r.stops = append(r.stops, ns.Close)
	_, nsAppAddr, err := r.app("app-ns", ns)
	if err != nil {
		return err
	}
	for _, name := range names {
		on := name == "iotsafe_layers_on"
		r.ssh(name, nsAppAddr, ns.Dial, func() (*lab.SSHServer, error) {
			return r.b.StartIoTsafe(r.ctx, name, lab.IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: on, Kernel: on, Netns: ns, GrantUID: labUID, MaxChannels: rpsMaxChannels(r.o)})
		})
	}
	return nil
}

// https starts the HTTPS baselines: Go's server (new connection per request, keep-alive,
// HTTP/2) and Caddy.
func (r *rpsRun) https() error {
	b := r.b
	certFile, keyFile, clientTLS, err := lab.WriteCert(b.Dir)
	if err != nil {
		return err
	}
	httpsProc, err := lab.StartProc("https_go", nil, b.Bin, "bench", "serve-https", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(b.Size), "--cert", certFile, "--key", keyFile)
	if err != nil {
		return err
	}
	r.stops = append(r.stops, httpsProc.Stop)
	httpsAddr, err := httpsProc.ReadLine(r.ctx, "listening ")
	if err != nil {
		return err
	}
	r.targets["https_go"] = lab.Target{Name: "https_go", Addrs: []string{httpsAddr}, TLS: clientTLS, Size: b.Size}
	r.targets["https_go_ka"] = lab.Target{Name: "https_go_ka", Addrs: []string{httpsAddr}, TLS: clientTLS, Size: b.Size, KeepAlive: true}
	r.targets["https2"] = lab.NewH2Target("https2", []string{httpsAddr}, clientTLS, b.Size)
	r.servers["https_go"], r.servers["https_go_ka"], r.servers["https2"] = httpsProc, httpsProc, httpsProc
	if !r.o.measures("https_caddy") {
		return nil
	}
	caddy, addr, err := b.StartCaddy(r.ctx, certFile, keyFile)
	if err != nil {
		r.skip(err, "https_caddy")
		return nil
	}
	r.stops = append(r.stops, caddy.Stop)
	r.targets["https_caddy"] = lab.Target{Name: "https_caddy", Addrs: []string{addr}, TLS: clientTLS, Size: b.Size}
	r.servers["https_caddy"] = caddy
	return nil
}

func frontdoorTargets(ctx context.Context, b *lab.Bench, maxChannels int, appAddr string, targets map[string]lab.Target, servers map[string]*lab.Proc, stops *[]func()) error {
	s, err := b.StartIoTsafe(ctx, "iotsafe_frontdoor", lab.IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true, Frontdoor: true, MaxChannels: maxChannels})
	if err != nil {
		return err
	}
	*stops = append(*stops, s.Proc.Stop)
	fleet, _, err := b.StartFleet(ctx, s, appAddr, 1, 1)
	if err != nil {
		return err
	}
	*stops = append(*stops, fleet.Stop)
	host := "f0.dev0." + lab.FrontdoorDomain
	tc := &tls.Config{RootCAs: s.Front.CA, ServerName: host}
	for _, ka := range []bool{false, true} {
		name := "frontdoor"
		if ka {
			name = "frontdoor_ka"
		}
		targets[name] = lab.Target{Name: name, Addrs: []string{s.Front.Addr}, TLS: tc, Size: b.Size, KeepAlive: ka,
			Host: host, Header: "Authorization: Bearer " + s.Front.Token + "\r\n"}
		servers[name] = s.Proc
	}
	return nil
}

func runRAM(ctx context.Context, b *lab.Bench, o *Options, res *Results, appAddr string) error {
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
				app, err := lab.StartProc("app-payload", nil, b.Bin, "bench", "serve-app", "--listen", "127.0.0.1:0", "--size", fmt.Sprint(size))
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

func ramOne(ctx context.Context, b *lab.Bench, o *Options, res *Results, appAddr, server, mode string, n, size int) error {
	s, p := n, 1
	if mode == "forwards" {
		s, p = 1, n
	}
	srv, err := startSSH(ctx, b, server, fmt.Sprintf("ram-%s-%s-%d-%d", server, mode, n, size), s, p)
	if err != nil {
		return err
	}
	defer srv.Proc.Stop()
	record := func(phase string, m lab.Memory, served, failed int) {
		res.RAM = append(res.RAM, RAMRow{Server: server, Mode: mode, N: n, Payload: size, Phase: phase, Mem: m, Served: served, Failed: failed})
	}
	before, err := lab.TreeMemory(srv.Proc.PID())
	if err != nil {
		return err
	}
	record("before", before, 0, 0)
	fleet, addrs, err := b.StartFleet(ctx, srv, appAddr, s, p)
	if err != nil {
		return err
	}
	defer fleet.Stop()
	est, err := lab.TreeMemory(srv.Proc.PID())
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
			if m, err := lab.TreeMemory(srv.Proc.PID()); err == nil && m.PSS > peak.PSS {
				peak = m
			}
		}
	}
	tick.Stop()
	// A short batch can end between two samples; the memory it used is still held now.
	if m, err := lab.TreeMemory(srv.Proc.PID()); err == nil && m.PSS > peak.PSS {
		peak = m
	}
	record("during", peak, len(addrs)-br.failed, br.failed)
	if br.failed == len(addrs) {
		return fmt.Errorf("no request succeeded through %d forwards", len(addrs))
	}
	return nil
}

// MedianCPU returns the median server CPU microseconds per request of path.
func (r *Results) MedianCPU(path string) (float64, bool) {
	return r.medianCPU(path, func(row RPSRow) time.Duration { return row.ServerCPU })
}

// MedianDeviceCPU is MedianCPU for the device side (the fleet) of an SSH path.
func (r *Results) MedianDeviceCPU(path string) (float64, bool) {
	return r.medianCPU(path, func(row RPSRow) time.Duration { return row.DeviceCPU })
}

func (r *Results) medianCPU(path string, cpu func(RPSRow) time.Duration) (float64, bool) {
	var v []float64
	for _, row := range r.RPS {
		if c := cpu(row); row.Path == path && c > 0 && row.Result.Requests > 0 {
			v = append(v, float64(c.Microseconds())/float64(row.Result.Requests))
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	return v[len(v)/2], true
}

// Median returns the median RPS of path, and how many runs it had.
func (r *Results) Median(path string) (float64, int) {
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
func (r *Results) PerUnitKB(server, mode, phase string) (float64, int) {
	kb, n, _ := r.perUnit(func(row RAMRow) bool { return row.Server == server && row.Mode == mode }, phase)
	return kb, n
}

// PayloadKB is PerUnitKB of the busy phase of the payload sweep at size bytes.
func (r *Results) PayloadKB(server string, size int) (float64, int) {
	kb, n, _ := r.perUnit(func(row RAMRow) bool { return row.Server == server && row.Mode == "payload" && row.Payload == size }, "during")
	return kb, n
}

// Served returns how many forwards served a request in the busy phase at the largest N
// of server/mode, and that N.
func (r *Results) Served(server, mode string) (served, n int) {
	_, n, row := r.perUnit(func(row RAMRow) bool { return row.Server == server && row.Mode == mode }, "during")
	return row.Served, n
}

// perUnit finds the largest N among rows that match, and returns the PSS growth per
// unit from "before" to phase, N, and the phase's row.
func (r *Results) perUnit(match func(RAMRow) bool, phase string) (float64, int, RAMRow) {
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
