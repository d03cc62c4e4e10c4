package hubbench

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Paper 000 table 3 (6 vCPUs, 1 KB, independent connections), requests per second.
var paperRPS = map[string]float64{"openssh": 3857, "dropbear": 2542, "https_caddy": 1300}

// Summary is summary.json; its schema is documented in docs/bench.md.
type Summary struct {
	Scenario    string             `json:"scenario"`
	Quick       bool               `json:"quick"`
	Concurrency int                `json:"concurrency"`
	RPS         map[string]float64 `json:"rps"`
	RPSRuns     map[string]int     `json:"rps_runs"`
	// RPSErrors counts failed requests per path over all its runs, with the first error
	// seen: req/s counts successes only, so a path with errors is not comparable.
	RPSErrors   map[string]int64  `json:"rps_errors,omitempty"`
	RPSFirstErr map[string]string `json:"rps_first_error,omitempty"`
	// CPUPerReq is the server's CPU time per request, in microseconds (its whole process
	// tree, median of the runs): the server's own cost, whatever the shared machine did.
	CPUPerReq map[string]float64 `json:"server_cpu_us_per_req"`
	// DeviceCPUPerReq is the same for the device side of SSH paths (the fleet, which
	// speaks as an agent does): where the rest of a path's cost goes.
	DeviceCPUPerReq map[string]float64            `json:"device_cpu_us_per_req"`
	Ratios          map[string]float64            `json:"ratios"`
	RAM             map[string]map[string]float64 `json:"ram_kb"`
	// Inactive is fig. 17: time of the active batch with K inactive forwards over K=0.
	Inactive map[string]map[string]float64 `json:"inactive_penalty"`
	// PS is fig. 19: batch time per sessions count over the best of that server; BestPS
	// is P/S at the best.
	PS map[string]map[string]float64 `json:"ps_normalized"`
	// RAMPayload is the busy PSS growth per device session by response size (bytes).
	RAMPayload map[string]map[string]float64 `json:"ram_payload_kb"`
	BestPS     map[string]float64            `json:"best_ps"`
	// Bulk is one large transfer per path (issue 21.6): MB/s and CPU per MB.
	Bulk    *BulkSummary       `json:"bulk,omitempty"`
	Paper   map[string]float64 `json:"paper_rps"`
	Skipped map[string]string  `json:"skipped,omitempty"`
}

// Summarize computes medians, ratios against the peers of the same run, and memory per unit.
func Summarize(r *Results, o Options) Summary {
	o.defaults()
	s := Summary{Scenario: "hub", Quick: o.Quick, Concurrency: o.Concurrency, RPS: map[string]float64{}, RPSRuns: map[string]int{}, Ratios: map[string]float64{},
		CPUPerReq: map[string]float64{}, DeviceCPUPerReq: map[string]float64{},
		RAM: map[string]map[string]float64{}, Paper: paperRPS, Skipped: r.Skipped,
		Inactive: map[string]map[string]float64{}, PS: map[string]map[string]float64{}, BestPS: map[string]float64{}}
	s.summarizeSweeps(r, o)
	s.summarizeRPS(r)
	s.rpsRatios()
	s.summarizeBulk(r, o)
	s.summarizeRAM(r, o)
	return s
}

// summarizeSweeps: figs. 17 (inactive forwards over k=0) and 19 (each P/S split over the
// best one).
func (s *Summary) summarizeSweeps(r *Results, o Options) {
	for _, sv := range sweepServers {
		base, ok := medianSeconds(r.Sweeps, func(x SweepRow) bool { return x.Part == "inactive" && x.Server == sv.name && x.K == 0 })
		for _, k := range o.InactiveK {
			if v, ok2 := medianSeconds(r.Sweeps, func(x SweepRow) bool { return x.Part == "inactive" && x.Server == sv.name && x.K == k }); ok && ok2 && base > 0 {
				if s.Inactive[sv.name] == nil {
					s.Inactive[sv.name] = map[string]float64{}
				}
				s.Inactive[sv.name][fmt.Sprint(k)] = v / base
			}
		}
		best, bestS := 0.0, 0
		times := map[int]float64{}
		for _, n := range o.PSSessions {
			if v, ok := medianSeconds(r.Sweeps, func(x SweepRow) bool { return x.Part == "ps" && x.Server == sv.name && x.Sessions == n }); ok {
				times[n] = v
				if best == 0 || v < best {
					best, bestS = v, n
				}
			}
		}
		for n, v := range times {
			if s.PS[sv.name] == nil {
				s.PS[sv.name] = map[string]float64{}
			}
			s.PS[sv.name][fmt.Sprint(n)] = v / best
		}
		if bestS > 0 {
			s.BestPS[sv.name] = float64(o.Total/bestS) / float64(bestS)
		}
	}
	if k := slices.Max(append([]int{0}, o.InactiveK...)); k > 0 {
		if v, ok := s.Inactive["iotsafe"][fmt.Sprint(k)]; ok {
			s.Ratios[fmt.Sprintf("inactive_penalty_iotsafe_k%d", k)] = v
		}
		if v, ok := s.Inactive["openssh"][fmt.Sprint(k)]; ok {
			s.Ratios[fmt.Sprintf("inactive_penalty_openssh_k%d", k)] = v
		}
	}
}

// summarizeRPS: median req/s and CPU per request per path, and failed requests.
func (s *Summary) summarizeRPS(r *Results) {
	for _, p := range RPSPaths {
		if m, n := r.Median(p); n > 0 {
			s.RPS[p], s.RPSRuns[p] = m, n
		}
		if c, ok := r.MedianCPU(p); ok {
			s.CPUPerReq[p] = c
		}
		if c, ok := r.MedianDeviceCPU(p); ok {
			s.DeviceCPUPerReq[p] = c
		}
		for _, row := range r.RPS {
			if row.Path != p || row.Result.Errors == 0 {
				continue
			}
			if s.RPSErrors == nil {
				s.RPSErrors, s.RPSFirstErr = map[string]int64{}, map[string]string{}
			}
			s.RPSErrors[p] += row.Result.Errors
			if s.RPSFirstErr[p] == "" {
				s.RPSFirstErr[p] = row.Result.FirstErr
			}
		}
	}
}

// rpsRatios compares paths measured in the same run.
func (s *Summary) rpsRatios() {
	cpuRatio := func(name, a, b string) {
		if s.CPUPerReq[a] > 0 && s.CPUPerReq[b] > 0 {
			s.Ratios[name] = s.CPUPerReq[a] / s.CPUPerReq[b]
		}
	}
	cpuRatio("server_cpu_iotsafe_over_openssh", "iotsafe", "openssh")
	cpuRatio("server_cpu_iotsafe_over_dropbear", "iotsafe", "dropbear")
	cpuRatio("server_cpu_iotsafe_over_https_go", "iotsafe", "https_go")
	cpuRatio("server_cpu_iotsafe_channels_over_openssh", "iotsafe_channels", "openssh")
	ratio := func(name, a, b string) {
		if s.RPS[a] > 0 && s.RPS[b] > 0 {
			s.Ratios[name] = s.RPS[a] / s.RPS[b]
		}
	}
	ratio("iotsafe_over_openssh", "iotsafe", "openssh")
	ratio("iotsafe_over_dropbear", "iotsafe", "dropbear")
	ratio("iotsafe_over_https_go", "iotsafe", "https_go")
	ratio("iotsafe_over_https_caddy", "iotsafe", "https_caddy")
	ratio("iotsafe_over_https2", "iotsafe", "https2")
	ratio("iotsafe_over_plain", "iotsafe", "plain")
	ratio("iotsafe_channels_over_openssh", "iotsafe_channels", "openssh")
	ratio("iotsafe_over_iotsafe_channels", "iotsafe", "iotsafe_channels")
	ratio("acl_on_over_off", "iotsafe", "iotsafe_acl_off")
	ratio("layers_on_over_off", "iotsafe_layers_on", "iotsafe_layers_off")
	ratio("frontdoor_over_https_go", "frontdoor", "https_go")
	ratio("frontdoor_ka_over_https_go_ka", "frontdoor_ka", "https_go_ka")
	cpuRatio("server_cpu_frontdoor_over_https_go", "frontdoor", "https_go")
}

// summarizeRAM: memory per session, per forward and against payload, per server.
func (s *Summary) summarizeRAM(r *Results, o Options) {
	for _, server := range []string{"iotsafe", "openssh", "dropbear"} {
		m := map[string]float64{}
		if v, n := r.PerUnitKB(server, "sessions", "established"); n > 0 {
			m["per_session_idle"], m["sessions_n"] = v, float64(n)
		}
		if v, n := r.PerUnitKB(server, "sessions", "during"); n > 0 {
			m["per_session_busy"] = v
		}
		if v, n := r.PerUnitKB(server, "forwards", "established"); n > 0 {
			m["per_forward_idle"], m["forwards_n"] = v, float64(n)
		}
		if v, n := r.PerUnitKB(server, "forwards", "during"); n > 0 {
			m["per_forward_busy"] = v
		}
		if served, n := r.Served(server, "sessions"); n > 0 {
			m["sessions_served"] = float64(served)
		}
		if served, n := r.Served(server, "forwards"); n > 0 {
			m["forwards_served"] = float64(served)
		}
		pm := map[string]float64{}
		for _, size := range o.Payloads {
			if v, n := r.PayloadKB(server, size); n > 0 {
				pm[fmt.Sprint(size)] = v
			}
		}
		if len(pm) > 0 {
			if s.RAMPayload == nil {
				s.RAMPayload = map[string]map[string]float64{}
			}
			s.RAMPayload[server] = pm
		}
		if len(m) > 0 {
			s.RAM[server] = m
		}
	}
	if a, b := s.RAM["iotsafe"]["per_session_idle"], s.RAM["openssh"]["per_session_idle"]; a > 0 && b > 0 {
		s.Ratios["session_ram_iotsafe_over_openssh"] = a / b
	}
}

// Write writes every output file of a run into dir.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "rps.csv"), []string{"path", "rep", "requests", "errors", "seconds", "rps", "server_cpu_seconds", "device_cpu_seconds", "first_error"}, func(w func(...string)) {
		for _, row := range r.RPS {
			w(row.Path, fmt.Sprint(row.Rep), fmt.Sprint(row.Result.Requests), fmt.Sprint(row.Result.Errors),
				fmt.Sprintf("%.3f", row.Result.Elapsed.Seconds()), fmt.Sprintf("%.1f", row.Result.RPS()), fmt.Sprintf("%.2f", row.ServerCPU.Seconds()), fmt.Sprintf("%.2f", row.DeviceCPU.Seconds()), row.Result.FirstErr)
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "bulk.csv"), []string{"path", "rep", "bytes", "seconds", "mb_per_s", "server_cpu_seconds", "device_cpu_seconds", "error"}, func(w func(...string)) {
		for _, row := range r.Bulk {
			w(row.Path, fmt.Sprint(row.Rep), fmt.Sprint(row.Bytes), fmt.Sprintf("%.4f", row.Elapsed.Seconds()), fmt.Sprintf("%.1f", row.MBps()),
				fmt.Sprintf("%.3f", row.ServerCPU.Seconds()), fmt.Sprintf("%.3f", row.DeviceCPU.Seconds()), row.Err)
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "ram.csv"), []string{"server", "mode", "n", "payload_bytes", "phase", "rss_kb", "pss_kb", "processes", "served", "failed"}, func(w func(...string)) {
		for _, row := range r.RAM {
			w(row.Server, row.Mode, fmt.Sprint(row.N), fmt.Sprint(row.Payload), row.Phase, fmt.Sprint(row.Mem.RSS), fmt.Sprint(row.Mem.PSS), fmt.Sprint(row.Mem.Procs),
				fmt.Sprint(row.Served), fmt.Sprint(row.Failed))
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "sweeps.csv"), []string{"part", "server", "sessions", "forwards_per_session", "active", "inactive", "rep", "seconds"}, func(w func(...string)) {
		for _, x := range r.Sweeps {
			w(x.Part, x.Server, fmt.Sprint(x.Sessions), fmt.Sprint(x.Forwards), fmt.Sprint(x.Active), fmt.Sprint(x.K), fmt.Sprint(x.Rep), fmt.Sprintf("%.4f", x.Seconds))
		}
	}); err != nil {
		return err
	}
	f, err := lab.WriteRunFiles(dir, env, s)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeReport(f, env, r, s)
}

// Print prints the summary as a table.
func Print(w io.Writer, s Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\treq/s (median)\tserver CPU µs/req\tdevice CPU µs/req\truns\tpaper 000 (6 vCPU)\t")
	for _, p := range RPSPaths {
		if v, ok := s.RPS[p]; ok {
			paper := ""
			if pv, ok := paperRPS[p]; ok {
				paper = fmt.Sprintf("%.0f", pv)
			}
			us := func(m map[string]float64) string {
				if c, ok := m[p]; ok {
					return fmt.Sprintf("%.0f", c)
				}
				return "–"
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%s\t\n", p, v, us(s.CPUPerReq), us(s.DeviceCPUPerReq), s.RPSRuns[p], paper)
		}
	}
	tw.Flush()
	for _, p := range RPSPaths {
		if n := s.RPSErrors[p]; n > 0 {
			fmt.Fprintf(w, "WARNING: %s had %d failed requests (first: %s); its req/s counts successes only\n", p, n, s.RPSFirstErr[p])
		}
	}
	printBulk(w, s.Bulk)
	if len(s.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (same run):")
		for _, k := range lab.SortedKeys(s.Ratios) {
			fmt.Fprintf(w, "  %-34s %.2f\n", k, s.Ratios[k])
		}
	}
	if len(s.RAM) > 0 {
		fmt.Fprintln(w, "\nmemory (PSS growth, KiB per unit, at the largest N):")
		for _, server := range []string{"iotsafe", "openssh", "dropbear"} {
			if m, ok := s.RAM[server]; ok {
				fmt.Fprintf(w, "  %-9s per session idle %7.1f busy %7.1f | per forward idle %7.1f busy %7.1f | served %.0f/%.0f sessions, %.0f/%.0f forwards\n", server,
					m["per_session_idle"], m["per_session_busy"], m["per_forward_idle"], m["per_forward_busy"],
					m["sessions_served"], m["sessions_n"], m["forwards_served"], m["forwards_n"])
			}
		}
	}
	lab.PrintGrid(w, "memory against payload (busy PSS growth, KiB per device session):", s.RAMPayload, "%s B: %.1f", nil)
	lab.PrintGrid(w, "inactive forwards (fig. 17): batch time over k=0", s.Inactive, "k=%s: %.2f", nil)
	lab.PrintGrid(w, "P/S sweep (fig. 19): batch time over the best, by sessions", s.PS, "S=%s: %.2f", func(server string) string {
		return fmt.Sprintf("   best P/S %.3g", s.BestPS[server])
	})
	for _, k := range lab.SortedKeys(s.Skipped) {
		fmt.Fprintf(w, "skipped %s: %s\n", k, s.Skipped[k])
	}
}

type barRow struct {
	Label string
	Value float64
	Text  string
	Width float64
	Y     int
	Ours  bool
}

func bars(labels []string, values map[string]float64, format string) ([]barRow, int) {
	var mx float64
	for _, l := range labels {
		mx = max(mx, values[l])
	}
	var out []barRow
	for _, l := range labels {
		v, ok := values[l]
		if !ok {
			continue
		}
		w := 0.0
		if mx > 0 {
			w = 440 * v / mx
		}
		out = append(out, barRow{Label: l, Value: v, Text: fmt.Sprintf(format, v), Width: w, Y: 10 + 26*len(out), Ours: strings.HasPrefix(l, "iotsafe") || strings.HasPrefix(l, "frontdoor")})
	}
	return out, 20 + 26*len(out)
}

var reportTmpl = template.Must(template.New("r").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>iotsafe bench hub — {{.Env.Time.Format "2006-01-02 15:04"}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}.note{color:#555;font-size:.9rem}
svg text{font-size:12px}
</style></head><body>
<h1>Host-server benchmark (paper 000, section VII)</h1>
<p class="note">{{.Env.CPU}}, {{.Env.Cores}} cores, Linux {{.Env.Kernel}}, {{.Env.Go}}, commit {{.Env.Commit}}{{if .Env.Quick}}, <b>quick run</b>: harness check, not a measurement{{end}}.
Peers: {{range $k, $v := .Env.Versions}}{{$k}}: {{$v}}; {{end}}</p>

{{if .RPSRows}}<h2>Requests per second (table 3)</h2>
<p class="note">Server CPU is the CPU time of the server under test (its whole process tree: one hub; sshd and every per-connection sshd) per request: its own cost, which the shared two cores of the load generator, the fleet and the application do not blur as they blur req/s. Device side CPU is the same for the fleet that holds an SSH path's reverse forwards (it speaks as <code>iotsafe agent</code> does, for every SSH server).</p>
<p class="note">1 KB responses, a new TCP connection per request (and a new TLS handshake for HTTPS), {{.Conc}} concurrent clients, median of the runs. Servers in the server role, a device-side fleet holding the reverse forwards, requests from the hub side, as in the paper's fig. 10.</p>
<svg width="720" height="{{.RPSHeight}}" role="img" aria-label="requests per second">
{{range .RPSBars}}<text x="150" y="{{.Y}}" dy="14" text-anchor="end">{{.Label}}</text>
<rect x="160" y="{{.Y}}" width="{{.Width}}" height="20" fill="{{if .Ours}}#2a7{{else}}#79b{{end}}"/>
<text x="{{printf "%.0f" .Width}}" dx="166" y="{{.Y}}" dy="14">{{.Text}}</text>
{{end}}</svg>
{{range $k, $v := .Errors}}<p><b>Warning: {{$k}} had {{$v}} failed requests</b> (first: {{index $.FirstErr $k}}); its req/s counts successes only.</p>
{{end}}<table><tr><th>path</th><th>this machine, req/s</th><th>server CPU, µs per request</th><th>device side CPU</th><th>runs</th><th>paper 000, req/s (6 vCPU)</th></tr>
{{range .RPSRows}}<tr><td>{{.Path}}</td><td>{{printf "%.0f" .Value}}</td><td>{{.CPU}}</td><td>{{.DeviceCPU}}</td><td>{{.Runs}}</td><td>{{.Paper}}</td></tr>
{{end}}</table>
<table><tr><th>ratio (same run)</th><th>value</th></tr>
{{range .Ratios}}<tr><td>{{.K}}</td><td>{{printf "%.2f" .V}}</td></tr>{{end}}</table>
{{else}}<h2>Requests per second (table 3)</h2><p><b>Not measured in this run</b> (run without <code>--only ram</code>).</p>{{end}}

{{if .Bulk}}<h2>Bulk transfer</h2>
<p class="note">One answer of {{.Bulk.Bytes}} bytes from the device application to a client through one forward (a recording, a firmware image); medians over the repetitions, which interleave the paths. CPU is per megabyte moved, of the server's process tree and of the device side.</p>
<table><tr><th>path</th><th>MB/s</th><th>server CPU, ms per MB</th><th>device side CPU, ms per MB</th><th>error</th></tr>
{{range .BulkRows}}<tr><td>{{.Name}}</td>{{range .Vals}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>{{end}}

<h2>Memory per proxification (figs. 15, 16)</h2>
<p class="note">PSS of the whole server process tree (one hub; every sshd or dropbear process), growth from before the fleet connected, per session (S=N, P=1) or per forward (S=1, P=N), at the largest N; "busy" is the peak while every forward serves a 1 KB request at once.</p>
{{if .RAMRows}}<table><tr><th>server</th><th>per session idle, KiB</th><th>per session busy</th><th>per forward idle</th><th>per forward busy</th></tr>
{{range .RAMRows}}<tr><td>{{.Server}}</td><td>{{printf "%.1f" .SI}}</td><td>{{printf "%.1f" .SB}}</td><td>{{printf "%.1f" .FI}}</td><td>{{printf "%.1f" .FB}}</td></tr>{{end}}</table>
{{else}}<p><b>Not measured in this run</b> (run without <code>--only rps</code>).</p>{{end}}
{{range .RAMCharts}}{{.}}{{end}}
<p class="note">Paper 000 anchors: compare the OpenSSH row above with Dropbear's (the hub's row is per session, over one process); the paper saw Dropbear above OpenSSH with a static debug build.</p>
<h2>Inactive forwards (fig. 17) and the P/S sweep (fig. 19)</h2>
{{if .Inactive}}<p class="note">One session with the active forwards plus k inactive ones; time of one request through every active forward, in parallel, over the same at k=0 (the paper saw 2.9–4× at k=8000 with OpenSSH).</p>
<table><tr><th>server</th>{{range .InactiveK}}<th>k={{.}}</th>{{end}}</tr>
{{range .InactiveRows}}<tr><td>{{.Name}}</td>{{range .Vals}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>{{else}}<p>Inactive forwards: not measured in this run.</p>{{end}}
{{if .PSRows}}<p class="note">The same number of active forwards spread over S sessions; batch time over the best of each server.</p>
<table><tr><th>server</th>{{range .PSSessions}}<th>S={{.}}</th>{{end}}<th>best P/S</th></tr>
{{range .PSRows}}<tr><td>{{.Name}}</td>{{range .Vals}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>{{else}}<p>P/S sweep: not measured in this run.</p>{{end}}
{{range .Charts}}{{.}}{{end}}
{{if .Skipped}}<h2>Skipped</h2><ul>{{range $k, $v := .Skipped}}<li>{{$k}}: {{$v}}</li>{{end}}</ul>{{end}}
<p class="note">Raw data: rps.csv, bulk.csv, ram.csv; summary.json (schema in docs/bench.md); environment.json.</p>
</body></html>
`))

type valRow struct {
	Name string
	Vals []string
}

func writeReport(w io.Writer, env lab.Environment, r *Results, s Summary) error {
	type rpsRow struct {
		Path      string
		Value     float64
		CPU       string
		DeviceCPU string
		Runs      int
		Paper     string
	}
	type kv struct {
		K string
		V float64
	}
	type ramRow struct {
		Server         string
		SI, SB, FI, FB float64
	}
	data := struct {
		Env          lab.Environment
		Conc         int
		RPSBars      []barRow
		RPSHeight    int
		RPSRows      []rpsRow
		Ratios       []kv
		RAMRows      []ramRow
		Skipped      map[string]string
		Errors       map[string]int64
		FirstErr     map[string]string
		Inactive     bool
		InactiveK    []string
		InactiveRows []valRow
		PSSessions   []string
		PSRows       []valRow
		Charts       []template.HTML
		RAMCharts    []template.HTML
		Bulk         *BulkSummary
		BulkRows     []valRow
	}{Env: env, Bulk: s.Bulk, Conc: s.Concurrency, Skipped: s.Skipped, Errors: s.RPSErrors, FirstErr: s.RPSFirstErr, Inactive: len(s.Inactive) > 0}
	data.RAMCharts = slices.DeleteFunc([]template.HTML{
		lab.LineChart("Fig. 15: one session per device (S=N, P=1)", "device sessions N", "PSS growth, MiB", ramSeries(r, "sessions"), true),
		lab.LineChart("Fig. 16: one gateway session (S=1, P=N)", "forwards N", "PSS growth, MiB", ramSeries(r, "forwards"), true),
		lab.LineChart("Busy memory against payload", "response bytes", "KiB per device session", lab.MapSeries(s.RAMPayload), true),
	}, func(h template.HTML) bool { return h == "" })
	data.Charts = slices.DeleteFunc([]template.HTML{
		lab.LineChart("Fig. 17: inactive forwards", "inactive forwards k", "batch time over k=0", lab.MapSeries(s.Inactive), false),
		lab.LineChart("Fig. 19: P/S sweep", "sessions S", "batch time over the best", lab.MapSeries(s.PS), true),
	}, func(h template.HTML) bool { return h == "" })
	cols := func(m map[string]map[string]float64) []string {
		seen := map[string]float64{}
		for _, inner := range m {
			for k := range inner {
				seen[k] = 0
			}
		}
		return lab.SortedNumKeys(seen)
	}
	data.InactiveK, data.PSSessions = cols(s.Inactive), cols(s.PS)
	for _, server := range lab.SortedKeys(s.Inactive) {
		row := valRow{Name: server}
		for _, k := range data.InactiveK {
			row.Vals = append(row.Vals, lab.FmtOpt(s.Inactive[server], k))
		}
		data.InactiveRows = append(data.InactiveRows, row)
	}
	for _, server := range lab.SortedKeys(s.PS) {
		row := valRow{Name: server}
		for _, n := range data.PSSessions {
			row.Vals = append(row.Vals, lab.FmtOpt(s.PS[server], n))
		}
		row.Vals = append(row.Vals, fmt.Sprintf("%.3g", s.BestPS[server]))
		data.PSRows = append(data.PSRows, row)
	}
	data.RPSBars, data.RPSHeight = bars(RPSPaths, s.RPS, "%.0f req/s")
	for _, p := range RPSPaths {
		if v, ok := s.RPS[p]; ok {
			paper := "–"
			if pv, ok := paperRPS[p]; ok {
				paper = fmt.Sprintf("%.0f", pv)
			}
			data.RPSRows = append(data.RPSRows, rpsRow{p, v, lab.FmtOpt(s.CPUPerReq, p), lab.FmtOpt(s.DeviceCPUPerReq, p), s.RPSRuns[p], paper})
		}
	}
	for _, k := range lab.SortedKeys(s.Ratios) {
		data.Ratios = append(data.Ratios, kv{k, s.Ratios[k]})
	}
	if b := s.Bulk; b != nil {
		for _, p := range BulkPaths {
			if v, ok := b.MBps[p]; ok {
				data.BulkRows = append(data.BulkRows, valRow{Name: p, Vals: []string{fmt.Sprintf("%.1f", v), lab.FmtOpt(b.ServerCPUPerMB, p), lab.FmtOpt(b.DeviceCPUPerMB, p), b.Errors[p]}})
			}
		}
	}
	for _, server := range []string{"iotsafe", "openssh", "dropbear"} {
		if m, ok := s.RAM[server]; ok {
			data.RAMRows = append(data.RAMRows, ramRow{server, m["per_session_idle"], m["per_session_busy"], m["per_forward_idle"], m["per_forward_busy"]})
		}
	}
	return reportTmpl.Execute(w, data)
}

// ramSeries is PSS growth (MiB) against N for one mode, idle and busy, per server.
func ramSeries(r *Results, mode string) []lab.Series {
	var out []lab.Series
	for _, server := range sshServers {
		for _, phase := range []string{"established", "during"} {
			s := lab.Series{Name: server + map[string]string{"established": " idle", "during": " busy"}[phase]}
			var ns []int
			for _, row := range r.RAM {
				if row.Server == server && row.Mode == mode && !slices.Contains(ns, row.N) {
					ns = append(ns, row.N)
				}
			}
			slices.Sort(ns)
			for _, n := range ns {
				var before, at int64 = -1, -1
				for _, row := range r.RAM {
					if row.Server == server && row.Mode == mode && row.N == n {
						switch row.Phase {
						case "before":
							before = row.Mem.PSS
						case phase:
							at = row.Mem.PSS
						}
					}
				}
				if before >= 0 && at >= 0 {
					s.X, s.Y = append(s.X, float64(n)), append(s.Y, float64(at-before)/1024)
				}
			}
			out = append(out, s)
		}
	}
	return out
}
