package jwtbench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Algorithms of the experiment, in report order (none is the paper's reference).
var Algorithms = []string{authn.None, authn.HS256, authn.HS384, authn.HS512}

// Options configures 'iotsafe bench jwt'.
type Options struct {
	Quick      bool
	Algs       []string // nil: all
	Transports []string // nil: all
	// Devices is the sweep of N. nil: a default list that stops for each transport once
	// it is past the knee; given: every N is run.
	Devices []int
	Rate    float64 // notifications/s per device; 0: closed loop (the paper)
	Reps    int     // repetitions per point (paper 5); 0 means 1
	// Warmup runs after every device logged in, before the measured Duration.
	Warmup, Duration time.Duration
	Timeout          time.Duration // per request (incomplete beyond it); 0 means 10s
	// Disconnects after U(DisconnectMin, DisconnectMax); 0 means the paper's 10s..1440s.
	DisconnectMin, DisconnectMax time.Duration
	// Prefill stores this many notifications per device before each start of the hub,
	// so the store is the size of one in service rather than empty (it slows as it grows).
	Prefill int
	// Store is where the hub keeps its registry and notifications: StoreSQLite (its
	// data folder, the default) or StorePostgres. With PostgreSQL, DSN is an empty
	// database of the operator's (the lab fills it); "" starts a scratch server here.
	Store, DSN string
	Progress   *lab.Progress
}

// The stores the lab runs the hub on.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// Stores are the values of Options.Store.
var Stores = []string{StoreSQLite, StorePostgres}

func (o *Options) defaults() {
	if o.Algs == nil {
		o.Algs = Algorithms
	}
	if o.Transports == nil {
		o.Transports = Transports
	}
	if o.Reps == 0 {
		o.Reps = 1
	}
	if o.Store == "" {
		o.Store = StoreSQLite
		if o.DSN != "" {
			o.Store = StorePostgres
		}
	}
	def := func(d *time.Duration, full, quick time.Duration) {
		if *d == 0 {
			*d = full
			if o.Quick {
				*d = quick
			}
		}
	}
	def(&o.Warmup, 5*time.Second, time.Second)
	def(&o.Duration, 20*time.Second, time.Second)
	def(&o.Timeout, 10*time.Second, 10*time.Second)
	// --quick disconnects within its short window, so the path is exercised.
	def(&o.DisconnectMin, 10*time.Second, 500*time.Millisecond)
	def(&o.DisconnectMax, 1440*time.Second, time.Second)
}

// sweep is the N list and whether it stops past the knee.
func (o *Options) sweep() ([]int, bool) {
	switch {
	case o.Devices != nil:
		return o.Devices, false
	case o.Quick:
		return []int{5}, false
	case o.Rate > 0:
		return []int{1280, 2560, 5120, 7680, 10240, 12800, 15360, 20480, 25600}, true
	}
	return []int{160, 320, 640, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 12800}, true
}

// Row is one simulator run and what the hub did during its measured window.
type Row struct {
	Transport string    `json:"transport"`
	Alg       string    `json:"alg"`
	Devices   int       `json:"devices"`
	Rep       int       `json:"rep"`
	Sim       SimResult `json:"sim"`
	Hub       HubWindow `json:"hub"`
}

// Throughput is complete notifications per second, as the devices saw them.
func (r Row) Throughput() float64 {
	if r.Sim.Window <= 0 {
		return 0
	}
	return float64(r.Sim.Complete) / r.Sim.Window
}

// Results is everything one run measured.
type Results struct {
	Rows    []Row
	Rate    float64
	Skipped []string
	// Store says where the notifications were: the SQLite file, or the PostgreSQL
	// database (its DSN without password, or the scratch server).
	Store string
}

// runner holds a run's hub data and the hub currently started.
type runner struct {
	b        *lab.Bench
	o        Options
	data     *lab.LabHub
	secrets  string
	restPort int
	hub      *lab.SSHServer
	hubAlg   string
	devices  int // enrolled: lab.DeviceName("", 0 .. devices-1)
	// dsn is the PostgreSQL database of the registry and store ("": the data folder);
	// pg the scratch server holding it, if the lab started one.
	dsn string
	pg  *pgscratch.Server
}

// Measure runs the sweep.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Rate: o.Rate}
	ns, knee := o.sweep()
	lab.RaiseFileLimit(o.Progress)
	r := &runner{b: b, o: o}
	var err error
	if res.Store, err = r.openStore(ctx); err != nil {
		return nil, err
	}
	defer r.closeStore()
	maxN := slices.Max(ns)
	r.devices = maxN
	o.Progress.Note(fmt.Sprintf("enrolling %d devices (keys, secrets)...", maxN))
	if err := r.enroll(ctx, maxN); err != nil {
		return nil, err
	}
	defer r.stopHub()
	o.Progress.Start(len(ns) * o.Reps * len(o.Algs) * len(o.Transports))
	defer o.Progress.Done()
	active := slices.Clone(o.Transports)
	for _, n := range ns {
		for rep := 1; rep <= o.Reps; rep++ {
			for _, alg := range o.Algs {
				if err := r.startHub(ctx, alg); err != nil {
					return res, err
				}
				for _, tr := range active {
					if tr == SSH && alg != o.Algs[0] {
						// No token on the SSH path: the algorithm changes nothing there.
						o.Progress.Step(fmt.Sprintf("%-9s %-5s N=%-6d rep %d: same as %s (no token)", tr, alg, n, rep, o.Algs[0]))
						continue
					}
					row, err := r.run(ctx, tr, alg, n, rep)
					if err != nil {
						if ctx.Err() != nil {
							return res, ctx.Err()
						}
						return res, fmt.Errorf("%s %s N=%d: %w", tr, alg, n, err)
					}
					res.Rows = append(res.Rows, row)
					o.Progress.Step(fmt.Sprintf("%-9s %-5s N=%-6d rep %d: %8.0f/s complete, %d incomplete, client p99 %.1f ms",
						tr, alg, n, rep, row.Throughput(), row.Sim.Incomplete, row.Sim.Client.P99))
				}
			}
		}
		if knee {
			active = slices.DeleteFunc(active, func(tr string) bool {
				if pastKnee(res.Rows, tr, o.Rate) {
					o.Progress.Note(fmt.Sprintf("%s: past the knee at N=%d, not swept further", tr, n))
					return true
				}
				return false
			})
			if len(active) == 0 {
				break
			}
		}
	}
	return res, nil
}

// pastKnee reports whether transport tr's sweep has passed its knee. Closed loop: two
// points in a row without raising the best throughput by 5%, or requests failing.
// Rate mode: the last point failed a request, fell 5% short of the offered rate, or
// had a p99 (from the planned send time) over 100 ms.
func pastKnee(rows []Row, tr string, rate float64) bool {
	pts := Points(rows)
	var mine []Point
	for _, p := range pts {
		if p.Transport == tr {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return false
	}
	byN := map[int][]Point{}
	var ns []int
	for _, p := range mine {
		if _, ok := byN[p.Devices]; !ok {
			ns = append(ns, p.Devices)
		}
		byN[p.Devices] = append(byN[p.Devices], p)
	}
	slices.Sort(ns)
	// A point's worst algorithm decides: the sweep goes on while any still holds.
	// Rate mode allows no incomplete request; the closed loop 1% (the paper's fig. 3
	// shows them rising past the knee).
	worst := func(n int) (thr float64, failed bool, p99 float64) {
		thr = -1
		for _, p := range byN[n] {
			if thr < 0 || p.Throughput < thr {
				thr = p.Throughput
			}
			failed = failed || p.IncompletePct > 1 || rate > 0 && p.Incomplete > 0
			p99 = max(p99, p.P99, p.ScheduledP99)
		}
		return
	}
	last := ns[len(ns)-1]
	thr, failed, p99 := worst(last)
	if rate > 0 {
		return failed || thr < 0.95*rate*float64(last) || p99 > 100
	}
	if failed {
		return true
	}
	best, stale := 0.0, 0
	for _, n := range ns {
		t, _, _ := worst(n)
		if t > best*1.05 {
			best, stale = max(best, t), 0
		} else {
			stale++
		}
	}
	return stale >= 2
}

// enroll makes the hub's data folder: maxN devices with SSH keys and telemetry secrets
// (written to a 0600 file the simulator reads), a profile with a direct alias to the
// hub's plain REST listener.
func (r *runner) enroll(ctx context.Context, maxN int) error {
	port, err := lab.StablePort() // every start of the hub listens on it
	if err != nil {
		return err
	}
	r.restPort = port
	r.secrets = filepath.Join(r.b.Dir, "secrets")
	f, err := os.OpenFile(r.secrets, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	opts := r.hubOpts("")
	opts.Sessions = maxN
	opts.Secrets = func(n, secret string) { fmt.Fprintf(f, "%s %s\n", n, secret) }
	r.data, err = r.b.EnrollIoTsafe(ctx, "hub", opts)
	if err != nil {
		return err
	}
	return f.Close()
}

// hubOpts is the lab hub's configuration for alg: front door, plain REST listener,
// metrics, and the algorithm.
func (r *runner) hubOpts(alg string) lab.IoTsafeOpts {
	unsigned := alg == authn.None // the paper's reference row; the hub warns at start
	conns := 1024
	if r.o.Devices != nil || !r.o.Quick {
		ns, _ := r.o.sweep()
		conns += slices.Max(ns)
	}
	cfg := func(c *hub.Config) {
		c.REST.Listen, c.Metrics.Listen = fmt.Sprintf("127.0.0.1:%d", r.restPort), "127.0.0.1:0"
		if alg != "" {
			c.JWT.Algorithm, c.JWT.AllowUnsigned = alg, unsigned
		}
	}
	return lab.IoTsafeOpts{Frontdoor: true, FrontdoorConns: conns, Configure: cfg, Registry: r.dsn,
		Direct: map[string]string{restAlias: fmt.Sprintf("127.0.0.1:%d", r.restPort)}}
}

// restAlias is the lab profile's direct alias of the hub's plain REST listener.
const restAlias = "api"

// sources are the simulated devices' own addresses (the hub's pool uses 127.100+).
var sources = netip.MustParsePrefix("127.77.0.0/16")

// startHub (re)starts the hub with alg, on an empty notification store so every run
// starts alike.
func (r *runner) startHub(ctx context.Context, alg string) error {
	if r.hub != nil && r.hubAlg == alg {
		return nil
	}
	r.stopHub()
	if err := r.emptyStore(ctx); err != nil {
		return err
	}
	if err := r.prefill(ctx); err != nil {
		return err
	}
	h, err := r.b.StartEnrolled(ctx, r.data, r.hubOpts(alg))
	if err != nil {
		return fmt.Errorf("starting the hub with %s: %w", alg, err)
	}
	if h.REST == "" || h.MetricsURL == "" {
		h.Proc.Stop()
		return fmt.Errorf("the hub did not print its REST and metrics addresses")
	}
	hk := filepath.Join(r.b.Dir, "hub.pub")
	if err := os.WriteFile(hk, ssh.MarshalAuthorizedKey(h.HostKey), 0o600); err != nil {
		h.Proc.Stop()
		return err
	}
	r.hub, r.hubAlg = h, alg
	return nil
}

// prefill writes Options.Prefill notifications per enrolled device into the (stopped)
// hub's empty store, in the store's own batches, oldest first and devices interleaved
// as a fleet sends them.
func (r *runner) prefill(ctx context.Context) error {
	if r.o.Prefill <= 0 {
		return nil
	}
	total := r.o.Prefill * r.devices
	r.o.Progress.Note(fmt.Sprintf("storing %d notifications (%d per device) before the hub starts...", total, r.o.Prefill))
	st, err := telemetry.Open(ctx, r.storeLocation(), lab.UnlimitedStore(), telemetry.Options{})
	if err != nil {
		return err
	}
	params := []byte(`{"uuid":"00000000-0000-4000-8000-000000000000"}`)
	batch := make([]telemetry.Notification, 0, 4096)
	for i := 0; i < total; i++ {
		batch = append(batch, telemetry.Notification{Device: lab.DeviceName("", i%r.devices), Name: "uuid", Parameters: params})
		if len(batch) == cap(batch) || i == total-1 {
			if _, err := st.Append(ctx, batch...); err != nil {
				st.Close()
				return fmt.Errorf("prefilling the store: %w", err)
			}
			batch = batch[:0]
		}
	}
	return st.Close()
}

func (r *runner) stopHub() {
	if r.hub != nil {
		r.hub.Proc.Stop()
		r.hub = nil
	}
}

// run starts the simulator for one point and reads the hub's metrics at the edges of
// its measured window.
func (r *runner) run(ctx context.Context, tr, alg string, n, rep int) (Row, error) {
	o := r.o
	row := Row{Transport: tr, Alg: alg, Devices: n, Rep: rep}
	if tr == SSH {
		row.Alg = "" // no token
	}
	args := []string{r.b.Bin, "bench", "jwt-sim", "--transport", tr, "--devices", fmt.Sprint(n),
		"--rate", fmt.Sprint(o.Rate), "--warmup", o.Warmup.String(), "--duration", o.Duration.String(),
		"--timeout", o.Timeout.String(), "--disconnect-min", o.DisconnectMin.String(), "--disconnect-max", o.DisconnectMax.String(),
		"--sources", sources.String()}
	if tr == SSH {
		args = append(args, "--addr", r.hub.Addr, "--host-key", filepath.Join(r.b.Dir, "hub.pub"), "--key-dir", r.data.Keys, "--alias", restAlias)
	} else {
		args = append(args, "--addr", r.hub.Front.Addr, "--domain", lab.FrontdoorDomain, "--ca", r.hub.Front.CAFile, "--secrets", r.secrets)
	}
	args = append(args, r.b.ProfileArgs(fmt.Sprintf("sim-%s-%s-%d", tr, alg, n))...)
	p, err := lab.StartProc("jwt-sim", nil, args...)
	if err != nil {
		return row, err
	}
	defer p.Stop()
	// Logging N devices in takes time; a simulator not ready by then is stuck.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(n)*10*time.Millisecond+o.Warmup+o.Duration+o.Timeout)
	defer cancel()
	if _, err := p.ReadLine(rctx, lineReady); err != nil {
		return row, err
	}
	if _, err := p.ReadLine(rctx, lineBegin); err != nil {
		return row, err
	}
	before, err := r.sample(ctx)
	if err != nil {
		return row, err
	}
	if _, err := p.ReadLine(rctx, lineEnd); err != nil {
		return row, err
	}
	after, err := r.sample(ctx)
	if err != nil {
		return row, err
	}
	line, err := p.ReadLine(rctx, lineResult)
	if err != nil {
		return row, err
	}
	if err := json.Unmarshal([]byte(line), &row.Sim); err != nil {
		return row, fmt.Errorf("simulator result: %w", err)
	}
	row.Hub = after.minus(before)
	row.Hub.RSSMiB, row.Hub.StorePSSMiB = after.RSSMiB, after.StorePSSMiB
	return row, nil
}

// sample reads the hub's counters, CPU time and memory, and the CPU time of the
// PostgreSQL server the lab started.
func (r *runner) sample(ctx context.Context) (HubWindow, error) {
	h, err := scrape(ctx, r.hub.MetricsURL)
	if err != nil {
		return h, err
	}
	cpu, err := lab.TreeCPU(r.hub.Proc.PID())
	if err != nil {
		return h, fmt.Errorf("hub: %w", err)
	}
	h.CPU = cpu.Seconds()
	if r.pg != nil {
		cpu, err := lab.TreeCPU(r.pg.PID())
		if err != nil {
			return h, fmt.Errorf("PostgreSQL server: %w", err)
		}
		h.StoreCPU = cpu.Seconds()
		if m, err := lab.TreeMemory(r.pg.PID()); err == nil {
			h.StorePSSMiB = float64(m.PSS) / 1024
		}
	}
	if m, err := lab.TreeMemory(r.hub.Proc.PID()); err == nil {
		h.RSSMiB = float64(m.RSS) / 1024
	}
	return h, nil
}

// Point is the median over repetitions of one (transport, algorithm, N).
type Point struct {
	Transport     string  `json:"transport"`
	Alg           string  `json:"alg"`
	Devices       int     `json:"devices"`
	Throughput    float64 `json:"complete_per_s"`
	Complete      float64 `json:"complete"`
	Incomplete    float64 `json:"incomplete"`
	IncompletePct float64 `json:"incomplete_pct"`
	Mean          float64 `json:"client_mean_ms"`
	P50           float64 `json:"client_p50_ms"`
	P99           float64 `json:"client_p99_ms"`
	ScheduledP99  float64 `json:"scheduled_p99_ms"`
	JWTMicros     float64 `json:"jwt_us"`
	SigMicros     float64 `json:"signature_us"`
	// JWTShareHandler is JWT time over the hub's request handling time (paper 004's
	// table 2); JWTShareCPU over the hub's CPU time (TLS and HTTP included).
	JWTShareHandler float64 `json:"jwt_share_handler_pct"`
	SigShareHandler float64 `json:"signature_share_handler_pct"`
	JWTShareCPU     float64 `json:"jwt_share_cpu_pct"`
	HubCPUPerReq    float64 `json:"hub_cpu_us_per_request"`
	// StoreCPUPerReq is the PostgreSQL server's CPU time per notification, when the
	// lab started it (0 on SQLite, whose work is in HubCPUPerReq).
	StoreCPUPerReq float64 `json:"store_cpu_us_per_request"`
	StorePSSMiB    float64 `json:"store_pss_mib"`
	SimCPUPerReq   float64 `json:"sim_cpu_us_per_request"`
	HubRSSMiB      float64 `json:"hub_rss_mib"`
	// Where a notification's time at the hub goes: the whole answer, the store's queue
	// (oldest of a batch) and its batch's commit, with the batch's mean size; and each
	// request's whole wait for the store (queue and commit, request-weighted).
	HandlerMillis float64 `json:"hub_handler_ms"`
	WaitMillis    float64 `json:"store_wait_ms"`
	AppendMillis  float64 `json:"store_append_ms"`
	CommitMillis  float64 `json:"commit_ms"`
	BatchSize     float64 `json:"batch_notifications"`
	// StoreBusyPct is the share of the window the store's single writer spent in its
	// transactions: as it nears 100% the store's queue, and the client time, grow.
	StoreBusyPct float64 `json:"store_busy_pct"`
	Reps         int     `json:"reps"`
}

// Points takes the median of each measure over repetitions.
func Points(rows []Row) []Point {
	type key struct {
		tr, alg string
		n       int
	}
	groups := map[key][]Row{}
	var order []key
	for _, r := range rows {
		k := key{r.Transport, r.Alg, r.Devices}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []Point
	for _, k := range order {
		rs := groups[k]
		med := func(f func(Row) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			return lab.Median(v)
		}
		p := Point{Transport: k.tr, Alg: k.alg, Devices: k.n, Reps: len(rs),
			Throughput: med(Row.Throughput),
			Complete:   med(func(r Row) float64 { return float64(r.Sim.Complete) }),
			Incomplete: med(func(r Row) float64 { return float64(r.Sim.Incomplete) }),
			Mean:       med(func(r Row) float64 { return r.Sim.Client.Mean }),
			P50:        med(func(r Row) float64 { return r.Sim.Client.P50 }),
			P99:        med(func(r Row) float64 { return r.Sim.Client.P99 }),
			ScheduledP99: med(func(r Row) float64 {
				return r.Sim.Scheduled.P99
			}),
			JWTMicros:       med(func(r Row) float64 { return r.Hub.JWTMicros() }),
			SigMicros:       med(func(r Row) float64 { return r.Hub.SigMicros() }),
			JWTShareHandler: med(func(r Row) float64 { return pct(r.Hub.JWTSum, r.Hub.InsertSum) }),
			SigShareHandler: med(func(r Row) float64 { return pct(r.Hub.SigSum, r.Hub.InsertSum) }),
			JWTShareCPU:     med(func(r Row) float64 { return pct(r.Hub.JWTSum, r.Hub.CPU) }),
			HubCPUPerReq:    med(func(r Row) float64 { return perReq(r.Hub.CPU, r.Sim.Complete) }),
			StoreCPUPerReq:  med(func(r Row) float64 { return perReq(r.Hub.StoreCPU, r.Sim.Complete) }),
			StorePSSMiB:     med(func(r Row) float64 { return r.Hub.StorePSSMiB }),
			SimCPUPerReq:    med(func(r Row) float64 { return perReq(r.Sim.CPU, r.Sim.Complete) }),
			HubRSSMiB:       med(func(r Row) float64 { return r.Hub.RSSMiB }),
			HandlerMillis:   med(func(r Row) float64 { return r.Hub.HandlerMillis() }),
			WaitMillis:      med(func(r Row) float64 { return r.Hub.WaitMillis() }),
			AppendMillis:    med(func(r Row) float64 { return r.Hub.AppendMillis() }),
			CommitMillis:    med(func(r Row) float64 { return r.Hub.CommitMillis() }),
			BatchSize:       med(func(r Row) float64 { return r.Hub.BatchSize() }),
			StoreBusyPct:    med(func(r Row) float64 { return pct(r.Hub.CommitSum, r.Sim.Window) }),
		}
		if total := p.Complete + p.Incomplete; total > 0 {
			p.IncompletePct = 100 * p.Incomplete / total
		}
		out = append(out, p)
	}
	return out
}

func pct(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * part / whole
}

func perReq(seconds float64, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return seconds * 1e6 / float64(n)
}

// label names a transport and algorithm in tables and charts.
func label(tr, alg string) string {
	if alg == "" {
		return tr
	}
	return tr + " " + strings.ToUpper(alg[:1]) + alg[1:]
}
