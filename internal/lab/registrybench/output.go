package registrybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// TargetSetupRatio is issue 18's target: session setup on PostgreSQL at least 0.8x
// SQLite's, on one hub.
const TargetSetupRatio = 0.8

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench hub, registry part: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && len(res.Rows) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(o.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema iotsafe.bench.registry/1, docs/bench.md).
type Summary struct {
	Schema   string `json:"schema"`
	Postgres string `json:"postgres"`
	Devices  int    `json:"devices"`
	Ops      int    `json:"ops"`
	Writers  int    `json:"writers"`
	Reps     int    `json:"reps"`
	Quick    bool   `json:"quick"`
	// PerSecond is backend -> metric -> rate: admin_device_add, admin_device_add_parallel,
	// admin_device_show, admin_grant, admin_revoke, session_setup (median of the passes),
	// notifications_append, notifications_append_two_hubs (PostgreSQL only).
	PerSecond map[string]map[string]float64 `json:"per_second"`
	// Ratios are postgres over sqlite, per metric (same run).
	Ratios map[string]float64 `json:"postgres_over_sqlite"`
	Target Target             `json:"target"`
}

// Target is the session setup target.
type Target struct {
	Ratio float64 `json:"min_setup_ratio"`
	Have  float64 `json:"setup_ratio"`
	Met   bool    `json:"met"`
}

// metric names a row's rate in the summary.
func (r Row) metric() string {
	switch r.Part {
	case "sessions":
		return "session_setup"
	case "telemetry":
		return "notifications_" + r.Op
	}
	if r.Writers > 1 {
		return "admin_" + r.Op + "_parallel"
	}
	return "admin_" + r.Op
}

// Summarize takes the median rate of each metric per backend and their ratios.
func Summarize(r *Results) Summary {
	o := r.Options
	s := Summary{Schema: "iotsafe.bench.registry/1", Postgres: r.Postgres, Devices: o.Devices, Ops: o.Ops, Writers: o.Writers, Reps: o.Reps, Quick: o.Quick,
		PerSecond: map[string]map[string]float64{}, Ratios: map[string]float64{}, Target: Target{Ratio: TargetSetupRatio}}
	rates := map[string]map[string][]float64{}
	for _, row := range r.Rows {
		if rates[row.Backend] == nil {
			rates[row.Backend] = map[string][]float64{}
		}
		rates[row.Backend][row.metric()] = append(rates[row.Backend][row.metric()], row.PerSecond())
	}
	for backend, m := range rates {
		s.PerSecond[backend] = map[string]float64{}
		for metric, v := range m {
			s.PerSecond[backend][metric] = lab.Median(v)
		}
	}
	for metric, pg := range s.PerSecond["postgres"] {
		if lite := s.PerSecond["sqlite"][metric]; lite > 0 {
			s.Ratios[metric] = pg / lite
		}
	}
	s.Target.Have = s.Ratios["session_setup"]
	s.Target.Met = s.Target.Have >= TargetSetupRatio
	return s
}

// Write writes registry.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "registry.csv"), []string{"backend", "part", "op", "writers", "rep", "n", "seconds", "per_second"}, func(w func(...string)) {
		for _, x := range r.Rows {
			w(x.Backend, x.Part, x.Op, fmt.Sprint(x.Writers), fmt.Sprint(x.Rep), fmt.Sprint(x.N), fmt.Sprintf("%.4f", x.Seconds), fmt.Sprintf("%.1f", x.PerSecond()))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench hub — registry", "S": s, "Metrics": metrics})
}

// metrics are the summary's metrics in the order they are shown, with their words.
var metrics = []struct{ Key, Label string }{
	{"session_setup", "device sessions set up per second (hub, fleet of N)"},
	{"admin_device_add", "device add per second (one writer)"},
	{"admin_device_add_parallel", "device add per second (several writers)"},
	{"admin_device_show", "device read per second"},
	{"admin_grant", "grant per second"},
	{"admin_revoke", "revoke per second"},
	{"notifications_append", "notifications stored per second (64 devices)"},
	{"notifications_append_two_hubs", "notifications stored per second, two hubs sharing"},
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\nregistry: SQLite in the data folder against PostgreSQL (%s), same run\n", s.Postgres)
	fmt.Fprintf(w, "  %-48s %10s %10s %8s\n", "", "sqlite", "postgres", "pg/sqlite")
	cell := func(v float64, format string) string {
		if v == 0 {
			return "-" // not measured: two hubs cannot share an SQLite store
		}
		return fmt.Sprintf(format, v)
	}
	for _, m := range metrics {
		fmt.Fprintf(w, "  %-48s %10s %10s %8s\n", m.Label, cell(s.PerSecond["sqlite"][m.Key], "%.0f"), cell(s.PerSecond["postgres"][m.Key], "%.0f"), cell(s.Ratios[m.Key], "%.2f"))
	}
	fmt.Fprintf(w, "target (session setup on PostgreSQL >= %.1fx SQLite's): %s, %.2fx\n", s.Target.Ratio, lab.Verdict(s.Target.Met), s.Target.Have)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>The registry: SQLite against PostgreSQL</h1>
<p class="note">{{template "env" .Env}}. PostgreSQL: {{.S.Postgres}}. Same run, same machine.
Admin operations: {{.S.Ops}} of each through the registry's API (keys made beforehand), one writer; device add also from {{.S.Writers}} writers at once, each with its own connection as separate admin commands have.
Session setup: a hub serving from each registry, {{.S.Devices}} devices of the lab's fleet connecting at once (32 handshakes in flight), each with its reverse forward, {{.S.Reps}} pass(es), median.
Notifications: the telemetry store (the data folder's telemetry.db; on PostgreSQL the table every hub shares) with 64 devices storing at once, each waiting until its notification is durable; on PostgreSQL also two hubs' stores sharing the table, half the devices each.</p>
<p>Target: session setup on PostgreSQL at least {{f "%.1f" .S.Target.Ratio}}x SQLite's — <b>{{if .S.Target.Met}}met{{else}}not met{{end}}</b> ({{f "%.2f" .S.Target.Have}}x).</p>
<table><tr><th>per second</th><th>SQLite</th><th>PostgreSQL</th><th>PostgreSQL / SQLite</th></tr>
{{range .Metrics}}<tr><td>{{.Label}}</td><td>{{with index $.S.PerSecond "sqlite" .Key}}{{f "%.0f" .}}{{else}}—{{end}}</td><td>{{with index $.S.PerSecond "postgres" .Key}}{{f "%.0f" .}}{{else}}—{{end}}</td><td>{{with index $.S.Ratios .Key}}{{f "%.2f" .}}{{else}}—{{end}}</td></tr>
{{end}}</table>
<p class="note">Raw data: registry.csv (every timed batch), summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`)
