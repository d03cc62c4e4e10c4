package jwtbench

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench jwt: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if res == nil {
		return err
	}
	o.defaults()
	s := Summarize(res, o)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(o.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// The paper's values (paper 004: 32 client nodes, one middleware server).
const paperKnee = 1280

var (
	paperSignatureMicros = map[string]float64{authn.HS256: 27.0, authn.HS384: 31.2, authn.HS512: 31.9}
	paperShare           = map[string][2]float64{ // signature %, JWT % of request processing
		authn.None: {math.NaN(), 0.59}, authn.HS256: {0.05, 0.76}, authn.HS384: {0.05, 0.77}, authn.HS512: {0.06, 0.76}}
	// Table 3: client time over none's, at 960 (before the knee), 1280 (knee), 1600.
	paperDiff = map[string][3]float64{authn.HS256: {0.63, 2.16, 4.08}, authn.HS384: {1.19, 4.05, 4.32}, authn.HS512: {1.64, 4.41, 6.97}}
	keyBytes  = map[string]int{authn.HS256: 64, authn.HS384: 128, authn.HS512: 128}
)

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema  string          `json:"schema"`
	Options optionsJSON     `json:"options"`
	Points  []Point         `json:"points"`
	Knees   map[string]Knee `json:"knees"`
	Table1  []Table1Row     `json:"table1"`
	Table2  []Table2Row     `json:"table2"`
	Table3  []Table3Row     `json:"table3"`
	Targets Targets         `json:"targets"`
}

type optionsJSON struct {
	Quick         bool     `json:"quick"`
	Rate          float64  `json:"rate_per_device"`
	Reps          int      `json:"reps"`
	Warmup        float64  `json:"warmup_s"`
	Duration      float64  `json:"duration_s"`
	Timeout       float64  `json:"timeout_s"`
	DisconnectMin float64  `json:"disconnect_min_s"`
	DisconnectMax float64  `json:"disconnect_max_s"`
	Prefill       int      `json:"prefill_per_device"`
	Store         string   `json:"store"`
	Algs          []string `json:"algs"`
	Transports    []string `json:"transports"`
}

// Knee is where a transport's throughput peaked (closed loop) or the most devices it
// served within the targets (rate mode).
type Knee struct {
	Devices    int     `json:"devices"`
	Throughput float64 `json:"complete_per_s"`
	// Beyond: the sweep went past it (a larger N did worse), so it is a knee and not
	// just the end of the list.
	Beyond bool `json:"beyond"`
}

// Table1Row is the signature check time per algorithm, at the https knee.
type Table1Row struct {
	Alg         string  `json:"alg"`
	KeyBytes    int     `json:"key_bytes"`
	Signature   float64 `json:"signature_us"`
	JWT         float64 `json:"jwt_us"`
	PaperMicros float64 `json:"paper_signature_us"`
}

// Table2Row is the JWT share of the hub's work per request, at the https knee.
type Table2Row struct {
	Alg            string  `json:"alg"`
	SignatureShare float64 `json:"signature_share_handler_pct"`
	JWTShare       float64 `json:"jwt_share_handler_pct"`
	JWTShareCPU    float64 `json:"jwt_share_cpu_pct"`
	PaperSignature float64 `json:"paper_signature_pct"`
	PaperJWT       float64 `json:"paper_jwt_pct"`
	HubCPUPerReq   float64 `json:"hub_cpu_us_per_request"`
}

// Table3Row is an algorithm's client time over none's at one load (https).
type Table3Row struct {
	Alg          string  `json:"alg"`
	Load         string  `json:"load"` // before the knee, knee, past the knee
	Devices      int     `json:"devices"`
	DiffPct      float64 `json:"diff_pct"`
	PaperDevices int     `json:"paper_devices"`
	PaperDiffPct float64 `json:"paper_diff_pct"`
}

// Targets are issue 13's targets as measured in this run (NaN: not measured).
type Targets struct {
	// Rate mode: the most devices served at the rate with no incomplete request, p99
	// from the planned send time under 100 ms (target >= 12,800 at 1/s).
	RateDevices int     `json:"rate_devices_ok"`
	RateP99     float64 `json:"rate_p99_ms"`
	// Closed loop: stored notifications per second at the https knee (target >= 10,000).
	KneeThroughput float64 `json:"knee_complete_per_s"`
	KneeDevices    int     `json:"knee_devices"`
	// JWT processing share of request handling, worst algorithm at the knee (<= 1%).
	JWTShareMax float64 `json:"jwt_share_max_pct"`
	// HS512 client time over none's at the knee (<= 2%).
	HS512VsNone float64 `json:"hs512_vs_none_pct"`
}

// Summarize derives the tables and targets from the runs.
func Summarize(r *Results, o Options) Summary {
	s := Summary{Schema: "iotsafe.bench.jwt/1", Points: Points(r.Rows), Knees: map[string]Knee{},
		Options: optionsJSON{Quick: o.Quick, Rate: o.Rate, Reps: o.Reps, Warmup: o.Warmup.Seconds(), Duration: o.Duration.Seconds(),
			Timeout: o.Timeout.Seconds(), DisconnectMin: o.DisconnectMin.Seconds(), DisconnectMax: o.DisconnectMax.Seconds(), Prefill: o.Prefill,
			Store: r.Store, Algs: o.Algs, Transports: o.Transports},
		Targets: Targets{RateP99: math.NaN(), KneeThroughput: math.NaN(), JWTShareMax: math.NaN(), HS512VsNone: math.NaN()}}
	for _, tr := range Transports {
		if k, ok := knee(s.Points, tr, o.Rate); ok {
			s.Knees[tr] = k
		}
	}
	k, ok := s.Knees[HTTPS]
	if !ok {
		// Rate mode where no N met the targets: the tables at the smallest N, so the
		// run still says how far off it was.
		ns, _ := byN(s.Points, HTTPS)
		if len(ns) == 0 {
			return s
		}
		k = Knee{Devices: ns[0]}
		s.Targets.RateP99 = worstP99(s.Points, HTTPS, ns[0])
	}
	s.tables12(o.Algs, k.Devices)
	s.table3(k.Devices)
	if o.Rate > 0 {
		if ok {
			s.Targets.RateDevices, s.Targets.RateP99 = k.Devices, worstP99(s.Points, HTTPS, k.Devices)
		}
	} else {
		s.Targets.KneeThroughput, s.Targets.KneeDevices = k.Throughput, k.Devices
	}
	return s
}

// atHTTPS is the HTTPS point of alg at n devices.
func (s *Summary) atHTTPS(alg string, n int) (Point, bool) {
	for _, p := range s.Points {
		if p.Transport == HTTPS && p.Alg == alg && p.Devices == n {
			return p, true
		}
	}
	return Point{}, false
}

// tables12 are tables 1 and 2 at the knee's n devices.
func (s *Summary) tables12(algs []string, n int) {
	at := s.atHTTPS
	k := Knee{Devices: n}
	for _, alg := range algs {
		p, ok := at(alg, k.Devices)
		if !ok {
			continue
		}
		if alg != authn.None {
			s.Table1 = append(s.Table1, Table1Row{Alg: alg, KeyBytes: keyBytes[alg], Signature: p.SigMicros, JWT: p.JWTMicros, PaperMicros: paperSignatureMicros[alg]})
		}
		ps := paperShare[alg]
		s.Table2 = append(s.Table2, Table2Row{Alg: alg, SignatureShare: p.SigShareHandler, JWTShare: p.JWTShareHandler, JWTShareCPU: p.JWTShareCPU,
			PaperSignature: ps[0], PaperJWT: ps[1], HubCPUPerReq: p.HubCPUPerReq})
		s.Targets.JWTShareMax = nanMax(s.Targets.JWTShareMax, p.JWTShareHandler)
	}
}

// table3 is table 3 around the knee at n devices.
func (s *Summary) table3(n int) {
	at := s.atHTTPS
	k := Knee{Devices: n}
	// Table 3 at the N before the knee, the knee and the one after (the paper's 960,
	// 1280, 1600 around its knee).
	var ns []int
	for _, p := range s.Points {
		if p.Transport == HTTPS && !slices.Contains(ns, p.Devices) {
			ns = append(ns, p.Devices)
		}
	}
	slices.Sort(ns)
	i := slices.Index(ns, k.Devices)
	loads := []struct {
		name string
		j    int
	}{{"before the knee", i - 1}, {"knee", i}, {"past the knee", i + 1}}
	for li, l := range loads {
		if l.j < 0 || l.j >= len(ns) {
			continue
		}
		none, ok := at(authn.None, ns[l.j])
		if !ok || none.Mean <= 0 {
			continue
		}
		for _, alg := range []string{authn.HS256, authn.HS384, authn.HS512} {
			p, ok := at(alg, ns[l.j])
			if !ok {
				continue
			}
			d := 100 * (p.Mean - none.Mean) / none.Mean
			s.Table3 = append(s.Table3, Table3Row{Alg: alg, Load: l.name, Devices: ns[l.j], DiffPct: d,
				PaperDevices: []int{960, 1280, 1600}[li], PaperDiffPct: paperDiff[alg][li]})
			if alg == authn.HS512 && l.name == "knee" {
				s.Targets.HS512VsNone = d
			}
		}
	}
}

func nanMax(a, b float64) float64 {
	if math.IsNaN(a) {
		return b
	}
	return max(a, b)
}

// byN groups a transport's points by N, in N order.
func byN(pts []Point, tr string) ([]int, map[int][]Point) {
	m := map[int][]Point{}
	var ns []int
	for _, p := range pts {
		if p.Transport != tr {
			continue
		}
		if _, ok := m[p.Devices]; !ok {
			ns = append(ns, p.Devices)
		}
		m[p.Devices] = append(m[p.Devices], p)
	}
	slices.Sort(ns)
	return ns, m
}

// knee finds a transport's knee: closed loop, the smallest N whose throughput (mean over
// algorithms) is within 5% of the sweep's best, where the plateau starts (the best point
// alone would wander along a flat plateau with the noise); rate mode, the largest N whose
// every algorithm met the targets.
func knee(pts []Point, tr string, rate float64) (Knee, bool) {
	ns, m := byN(pts, tr)
	if len(ns) == 0 {
		return Knee{}, false
	}
	var k Knee
	found := false
	for _, n := range ns {
		thr, ok := 0.0, true
		for _, p := range m[n] {
			thr += p.Throughput / float64(len(m[n]))
			if rate > 0 && (p.Incomplete > 0 || p.ScheduledP99 > 100 || p.Throughput < 0.95*rate*float64(n)) {
				ok = false
			}
		}
		if rate > 0 {
			if ok {
				k, found = Knee{Devices: n, Throughput: thr}, true
			} else if found {
				k.Beyond = true
				break
			}
			continue
		}
		if !found || thr > k.Throughput {
			k, found = Knee{Devices: n, Throughput: thr}, true
		}
	}
	if rate == 0 {
		best := k.Throughput
		for _, n := range ns {
			thr := 0.0
			for _, p := range m[n] {
				thr += p.Throughput / float64(len(m[n]))
			}
			if thr >= plateau*best {
				k = Knee{Devices: n, Throughput: thr}
				break
			}
		}
		k.Beyond = ns[len(ns)-1] > k.Devices
	}
	return k, found
}

// plateau: a throughput within 5% of the best is on the plateau (the sweep's stopping
// rule uses the same margin).
const plateau = 0.95

func worstP99(pts []Point, tr string, n int) float64 {
	v := math.NaN()
	for _, p := range pts {
		if p.Transport == tr && p.Devices == n {
			v = nanMax(v, p.ScheduledP99)
		}
	}
	return v
}

// Write writes every output file of a run into dir.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	if err := lab.WriteCSV(filepath.Join(dir, "runs.csv"), []string{"transport", "alg", "devices", "rate", "rep", "window_s", "complete", "incomplete",
		"complete_per_s", "client_mean_ms", "client_p50_ms", "client_p99_ms", "scheduled_p99_ms", "logins", "login_failures", "refreshes", "disconnects",
		"hub_inserts", "hub_insert_s", "hub_jwt_count", "hub_jwt_s", "hub_signature_s", "hub_stored", "hub_batches", "hub_store_wait_s", "hub_commit_s", "hub_appends", "hub_append_s", "hub_cpu_s", "hub_rss_mib", "sim_cpu_s", "store_cpu_s", "store_pss_mib", "first_error"},
		func(w func(...string)) {
			for _, x := range r.Rows {
				w(x.Transport, x.Alg, fmt.Sprint(x.Devices), fmt.Sprint(x.Sim.Rate), fmt.Sprint(x.Rep), f2(x.Sim.Window), fmt.Sprint(x.Sim.Complete),
					fmt.Sprint(x.Sim.Incomplete), f2(x.Throughput()), fmt.Sprintf("%.3f", x.Sim.Client.Mean), fmt.Sprintf("%.3f", x.Sim.Client.P50),
					fmt.Sprintf("%.3f", x.Sim.Client.P99), fmt.Sprintf("%.3f", x.Sim.Scheduled.P99), fmt.Sprint(x.Sim.Logins), fmt.Sprint(x.Sim.LoginFailures),
					fmt.Sprint(x.Sim.Refreshes), fmt.Sprint(x.Sim.Disconnects), fmt.Sprint(x.Hub.Inserts), fmt.Sprintf("%.4f", x.Hub.InsertSum),
					fmt.Sprint(x.Hub.JWTCount), fmt.Sprintf("%.6f", x.Hub.JWTSum), fmt.Sprintf("%.6f", x.Hub.SigSum), fmt.Sprint(x.Hub.Stored),
					fmt.Sprint(x.Hub.Batches), fmt.Sprintf("%.4f", x.Hub.WaitSum), fmt.Sprintf("%.4f", x.Hub.CommitSum), fmt.Sprint(x.Hub.Appends), fmt.Sprintf("%.4f", x.Hub.AppendSum), fmt.Sprintf("%.3f", x.Hub.CPU), f2(x.Hub.RSSMiB), fmt.Sprintf("%.3f", x.Sim.CPU), fmt.Sprintf("%.3f", x.Hub.StoreCPU), f2(x.Hub.StorePSSMiB), x.Sim.FirstError)
			}
		}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "points.csv"), []string{"transport", "alg", "devices", "reps", "complete_per_s", "incomplete_pct",
		"client_mean_ms", "client_p99_ms", "scheduled_p99_ms", "jwt_us", "signature_us", "jwt_share_handler_pct", "signature_share_handler_pct",
		"jwt_share_cpu_pct", "hub_cpu_us_per_request", "sim_cpu_us_per_request", "hub_rss_mib", "hub_handler_ms", "store_wait_ms", "store_append_ms", "commit_ms",
		"batch_notifications", "store_busy_pct", "store_cpu_us_per_request", "store_pss_mib"}, func(w func(...string)) {
		for _, p := range s.Points {
			w(p.Transport, p.Alg, fmt.Sprint(p.Devices), fmt.Sprint(p.Reps), f2(p.Throughput), fmt.Sprintf("%.3f", p.IncompletePct),
				fmt.Sprintf("%.3f", p.Mean), fmt.Sprintf("%.3f", p.P99), fmt.Sprintf("%.3f", p.ScheduledP99), f2(p.JWTMicros), f2(p.SigMicros),
				fmt.Sprintf("%.3f", p.JWTShareHandler), fmt.Sprintf("%.3f", p.SigShareHandler), fmt.Sprintf("%.3f", p.JWTShareCPU),
				f2(p.HubCPUPerReq), f2(p.SimCPUPerReq), f2(p.HubRSSMiB), fmt.Sprintf("%.3f", p.HandlerMillis), fmt.Sprintf("%.3f", p.WaitMillis),
				fmt.Sprintf("%.3f", p.AppendMillis), fmt.Sprintf("%.3f", p.CommitMillis), f2(p.BatchSize), f2(p.StoreBusyPct), f2(p.StoreCPUPerReq), f2(p.StorePSSMiB))
		}
	}); err != nil {
		return err
	}
	f, err := lab.WriteRunFiles(dir, env, jsonSafe(s))
	if err != nil {
		return err
	}
	defer f.Close()
	return writeReport(f, env, r, s)
}

// jsonSafe replaces NaN (not measured) by null: encoding/json refuses NaN.
func jsonSafe(s Summary) any {
	opt := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	t := s.Targets
	type targetsJSON struct {
		RateDevices    int      `json:"rate_devices_ok"`
		RateP99        *float64 `json:"rate_p99_ms"`
		KneeThroughput *float64 `json:"knee_complete_per_s"`
		KneeDevices    int      `json:"knee_devices"`
		JWTShareMax    *float64 `json:"jwt_share_max_pct"`
		HS512VsNone    *float64 `json:"hs512_vs_none_pct"`
	}
	type table2JSON struct {
		Table2Row
		PaperSignature *float64 `json:"paper_signature_pct"`
	}
	t2 := make([]table2JSON, len(s.Table2))
	for i, r := range s.Table2 {
		t2[i] = table2JSON{Table2Row: r, PaperSignature: opt(r.PaperSignature)}
	}
	return struct {
		Summary
		Table2  []table2JSON `json:"table2"`
		Targets targetsJSON  `json:"targets"`
	}{s, t2, targetsJSON{t.RateDevices, opt(t.RateP99), opt(t.KneeThroughput), t.KneeDevices, opt(t.JWTShareMax), opt(t.HS512VsNone)}}
}

// Print prints the points and the targets as tables.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "notification store: %s\n", s.Options.Store)
	// The PostgreSQL server's CPU time is known only when the lab started it.
	storeCPU := slices.ContainsFunc(s.Points, func(p Point) bool { return p.StoreCPUPerReq > 0 })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "transport\talg\tN\tcomplete/s\tincomplete %\tclient mean ms\tp99 ms\tJWT µs\tsignature µs\tJWT % of handling\thub ms\tstore wait ms\tin store ms\tcommit ms\tstore busy %\thub CPU µs/req\t"
	if storeCPU {
		head += "PostgreSQL CPU µs/req\tPostgreSQL MiB\t"
	}
	fmt.Fprintln(tw, head)
	for _, p := range s.Points {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t", p.Transport, dash(p.Alg), p.Devices, p.Throughput,
			p.IncompletePct, p.Mean, p.P99, opt(p.JWTMicros, "%.1f"), opt(p.SigMicros, "%.2f"), opt(p.JWTShareHandler, "%.2f"), p.HandlerMillis, p.WaitMillis,
			p.AppendMillis, p.CommitMillis, p.StoreBusyPct, p.HubCPUPerReq)
		if storeCPU {
			fmt.Fprintf(tw, "%.0f\t%.0f\t", p.StoreCPUPerReq, p.StorePSSMiB)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, tr := range Transports {
		if k, ok := s.Knees[tr]; ok {
			what := "knee"
			if !k.Beyond {
				what = "best so far (the sweep did not pass it)"
			}
			fmt.Fprintf(w, "%-9s %s at N=%d: %.0f complete/s (paper: knee at %d devices)\n", tr, what, k.Devices, k.Throughput, paperKnee)
		}
	}
	t := s.Targets
	if !math.IsNaN(t.JWTShareMax) {
		fmt.Fprintf(w, "JWT share of request handling at the knee: at most %.2f%% (target <= 1%%; paper 0.59-0.77%%)\n", t.JWTShareMax)
	}
	if !math.IsNaN(t.HS512VsNone) {
		fmt.Fprintf(w, "HS512 client time over none's at the knee: %+.2f%% (target <= 2%%; paper 4.41%%)\n", t.HS512VsNone)
	}
	switch {
	case s.Options.Rate > 0 && t.RateDevices > 0:
		fmt.Fprintf(w, "rate mode: %d devices served with no incomplete request, p99 %.1f ms (target >= 12,800 and < 100 ms)\n", t.RateDevices, t.RateP99)
	case s.Options.Rate > 0 && !math.IsNaN(t.RateP99):
		fmt.Fprintf(w, "rate mode: no N met the targets (no incomplete request, p99 < 100 ms); at the smallest, p99 %.1f ms\n", t.RateP99)
	}
}

func dash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func opt(v float64, f string) string {
	if v == 0 || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf(f, v)
}

var reportTmpl = template.Must(template.New("r").Funcs(template.FuncMap{"f": func(f string, v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf(f, v)
}}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>iotsafe bench jwt — {{.Env.Time.Format "2006-01-02 15:04"}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}.note{color:#555;font-size:.9rem}
svg text{font-size:12px}
</style></head><body>
<h1>Telemetry with JWT (paper 004)</h1>
<p class="note">{{.Env.CPU}}, {{.Env.Cores}} cores, Linux {{.Env.Kernel}}, {{.Env.Go}}, commit {{.Env.Commit}}{{if .Env.Quick}}, <b>quick run</b>: harness check, not a measurement{{end}}.
The simulator and the hub share this machine (the paper: 32 client nodes and one server).
{{if .S.Options.Rate}}Rate mode: {{.S.Options.Rate}} notification(s) per second per device; client time counted from the planned send time.{{else}}Closed loop, as the paper: each device sends as soon as it has the previous answer.{{end}}
{{.S.Options.Duration}} s measured per point after {{.S.Options.Warmup}} s of warm-up (the paper: 600 s), median of {{.S.Options.Reps}} run(s); disconnects every U({{.S.Options.DisconnectMin}} s, {{.S.Options.DisconnectMax}} s).
Notification store: {{.S.Options.Store}}{{if .S.Options.Prefill}}, holding {{.S.Options.Prefill}} notifications per device at each start of the hub{{else}}, empty at each start of the hub{{end}}.</p>

<h2>Knees</h2>
<table><tr><th>transport</th><th>N at the knee</th><th>complete/s there</th><th>passed?</th><th>paper</th></tr>
{{range .Knees}}<tr><td>{{.Name}}</td><td>{{.K.Devices}}</td><td>{{f "%.0f" .K.Throughput}}</td><td>{{if .K.Beyond}}yes{{else}}no: the sweep ended first{{end}}</td><td>1280 devices (HTTPS keep-alive)</td></tr>{{end}}</table>

<h2>Scalability (figs. 2-4)</h2>
{{range .Charts}}{{.}}{{end}}

<h2>JWT processing (figs. 5, 6; tables 1, 2)</h2>
<p class="note">Measured in the hub by its own histograms, over each window: the signature check alone (fig. 5) and a token's whole processing from its base64 string to checked claims (fig. 6), at the HTTPS knee.</p>
{{range .JWTCharts}}{{.}}{{end}}
<table><tr><th>key bytes</th><th>algorithm</th><th>signature µs (ours)</th><th>whole JWT µs (ours)</th><th>paper: signature µs</th></tr>
{{range .S.Table1}}<tr><td>{{.KeyBytes}}</td><td>{{.Alg}}</td><td>{{f "%.2f" .Signature}}</td><td>{{f "%.1f" .JWT}}</td><td>{{f "%.1f" .PaperMicros}}</td></tr>{{end}}</table>
<table><tr><th>algorithm</th><th>signature, % of handling</th><th>JWT, % of handling</th><th>JWT, % of hub CPU</th><th>hub CPU µs per request</th><th>paper: signature %</th><th>paper: JWT %</th></tr>
{{range .S.Table2}}<tr><td>{{.Alg}}</td><td>{{f "%.3f" .SignatureShare}}</td><td>{{f "%.2f" .JWTShare}}</td><td>{{f "%.2f" .JWTShareCPU}}</td><td>{{f "%.0f" .HubCPUPerReq}}</td><td>{{f "%.2f" .PaperSignature}}</td><td>{{f "%.2f" .PaperJWT}}</td></tr>{{end}}</table>
<p class="note">"Handling" is the hub's time per notification request from its first byte to its answer (iotsafe_rest_request_seconds: the paper's middleware processing time, durable storage included); "hub CPU" is the hub process's CPU time per request, TLS and HTTP included: the stricter share.</p>

<h2>Algorithms against none (table 3)</h2>
<table><tr><th>algorithm</th><th>load</th><th>N</th><th>client time over none's (ours)</th><th>paper: N</th><th>paper</th></tr>
{{range .S.Table3}}<tr><td>{{.Alg}}</td><td>{{.Load}}</td><td>{{.Devices}}</td><td>{{f "%+.2f%%" .DiffPct}}</td><td>{{.PaperDevices}}</td><td>{{f "%.2f%%" .PaperDiffPct}}</td></tr>{{end}}</table>
<p class="note">Mean client time over HTTPS keep-alive. On a shared two-core machine runs differ by a few percent between repetitions; read small differences with --reps 5 medians.</p>

<h2>Transports</h2>
{{range .TransportCharts}}{{.}}{{end}}
<p class="note">The ssh transport carries the same notifications as plain HTTP over each device's SSH session (a direct forward to the hub's plain REST listener): the device is known by its session, so it sends no token and the hub verifies none.</p>
<p class="note">Raw data: runs.csv (every run), points.csv (medians); summary.json (schema in docs/bench.md); environment.json.</p>
</body></html>
`))

func writeReport(w io.Writer, env lab.Environment, r *Results, s Summary) error {
	type kneeRow struct {
		Name string
		K    Knee
	}
	var knees []kneeRow
	for _, tr := range Transports {
		if k, ok := s.Knees[tr]; ok {
			knees = append(knees, kneeRow{tr, k})
		}
	}
	series := func(f func(Point) float64, tr string) []lab.Series {
		var out []lab.Series
		idx := map[string]int{}
		for _, p := range s.Points {
			if tr != "" && p.Transport != tr {
				continue
			}
			name := label(p.Transport, p.Alg)
			i, ok := idx[name]
			if !ok {
				i = len(out)
				idx[name] = i
				out = append(out, lab.Series{Name: name})
			}
			out[i].X = append(out[i].X, float64(p.Devices))
			out[i].Y = append(out[i].Y, f(p))
		}
		return out
	}
	lc := lab.LineChart
	charts := []template.HTML{
		lc("Fig. 2: complete requests per second", "devices (N)", "complete/s", series(func(p Point) float64 { return p.Throughput }, ""), true),
		lc("Fig. 3: incomplete requests (% of sent)", "devices (N)", "incomplete %", series(func(p Point) float64 { return p.IncompletePct }, ""), true),
		lc("Fig. 4: client time, mean", "devices (N)", "ms", series(func(p Point) float64 { return p.Mean }, ""), true),
		lc("Client time, p99", "devices (N)", "ms", series(func(p Point) float64 { return p.P99 }, ""), true),
	}
	jwtCharts := []template.HTML{
		lc("Fig. 5: signature check", "devices (N)", "µs", series(func(p Point) float64 { return p.SigMicros }, HTTPS), true),
		lc("Fig. 6: whole token processing", "devices (N)", "µs", series(func(p Point) float64 { return p.JWTMicros }, HTTPS), true),
	}
	trCharts := []template.HTML{
		lc("Hub CPU per notification", "devices (N)", "µs", series(func(p Point) float64 { return p.HubCPUPerReq }, ""), true),
		lc("Hub memory (RSS)", "devices (N)", "MiB", series(func(p Point) float64 { return p.HubRSSMiB }, ""), true),
	}
	return reportTmpl.Execute(w, map[string]any{"Env": env, "S": s, "Knees": knees, "Charts": charts, "JWTCharts": jwtCharts,
		"TransportCharts": trCharts, "Rows": r.Rows})
}
