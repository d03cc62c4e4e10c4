package churnbench

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled, or the hub died) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench churn: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && res.Start.Files == 0 {
		return err // nothing measured yet
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema  string      `json:"schema"`
	Options optionsJSON `json:"options"`
	// HubAlive is false when the hub died during the churn: the run failed.
	HubAlive bool `json:"hub_alive"`
	// Kills is how many agents were SIGKILLed and restarted; Back is, for each, from
	// its new process's start to its session being ready again.
	Kills int      `json:"kills"`
	Back  lab.Dist `json:"back_ms"`
	// Requests through the devices during the churn.
	Answered int64 `json:"requests_answered"`
	Failed   int64 `json:"requests_not_answered"`
	// The hub with the whole fleet connected, before and after the churn, and the
	// ratios end/start (1.0: nothing grew).
	Start            Footprint `json:"hub_start"`
	End              Footprint `json:"hub_end"`
	PSSGrowth        float64   `json:"hub_pss_end_over_start"`
	HeapGrowth       float64   `json:"hub_heap_end_over_start"`
	LiveGrowth       float64   `json:"hub_heap_live_end_over_start"`
	GoroutinesGrowth float64   `json:"hub_goroutines_end_over_start"`
	FilesGrowth      float64   `json:"hub_files_end_over_start"`
}

type optionsJSON struct {
	Devices    int     `json:"devices"`
	KillShare  float64 `json:"kill_share"`
	EveryS     float64 `json:"every_s"`
	DurationS  float64 `json:"duration_s"`
	Requesters int     `json:"requesters"`
	Quick      bool    `json:"quick"`
}

// Summarize computes the summary of a run.
func Summarize(r *Results) Summary {
	o := r.Options
	s := Summary{Schema: "iotsafe.bench.churn/1", HubAlive: r.HubAlive, Kills: len(r.Kills), Answered: r.Answered, Failed: r.Failed,
		Start: r.Start, End: r.End,
		Options: optionsJSON{Devices: o.Devices, KillShare: o.KillShare, EveryS: o.Every.Seconds(), DurationS: o.Duration.Seconds(), Requesters: o.Requesters, Quick: o.Quick}}
	ds := make([]time.Duration, 0, len(r.Kills))
	for _, k := range r.Kills {
		ds = append(ds, k.Back)
	}
	s.Back = lab.DistOf(ds)
	s.PSSGrowth = ratio(r.End.PSSKiB, r.Start.PSSKiB)
	s.HeapGrowth = ratio(r.End.HeapInuseKiB, r.Start.HeapInuseKiB)
	s.LiveGrowth = ratio(r.End.HeapLiveKiB, r.Start.HeapLiveKiB)
	s.GoroutinesGrowth = ratio(r.End.Goroutines, r.Start.Goroutines)
	s.FilesGrowth = ratio(int64(r.End.Files), int64(r.Start.Files))
	return s
}

// ratio is end/start, 0 where either was not measured.
func ratio(end, start int64) float64 {
	if start <= 0 || end <= 0 {
		return 0
	}
	return float64(end) / float64(start)
}

// Write writes kills.csv, environment.json, summary.json and report.html into dir.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kills := slices.Clone(r.Kills)
	slices.SortFunc(kills, func(a, b Kill) int { return int(a.At - b.At) })
	if err := lab.WriteCSV(filepath.Join(dir, "kills.csv"), []string{"device", "killed_at_s", "back_ms"}, func(w func(...string)) {
		for _, k := range kills {
			back := "missing"
			if k.Back >= 0 {
				back = fmt.Sprintf("%.1f", k.Back.Seconds()*1000)
			}
			w(k.Device, fmt.Sprintf("%.3f", k.At.Seconds()), back)
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"S": s})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	o := s.Options
	fmt.Fprintf(w, "\n%d agents (a third each multiplexed, channel per connection, compressed) on one hub; every %gs %.0f%% of them SIGKILLed and restarted, for %gs; %d requesters through the devices\n",
		o.Devices, o.EveryS, 100*o.KillShare, o.DurationS, o.Requesters)
	if !s.HubAlive {
		fmt.Fprintln(w, "  THE HUB DIED during the churn")
	}
	b := s.Back
	fmt.Fprintf(w, "  %d kills; back (new agent to ready session): p50 %.0f ms, p90 %.0f, p99 %.0f, max %.0f", s.Kills, b.P50, b.P90, b.P99, b.Max)
	if b.Missing > 0 {
		fmt.Fprintf(w, ", %d NOT BACK", b.Missing)
	}
	fmt.Fprintf(w, "\n  requests: %d answered, %d not (connections to an agent being killed)\n", s.Answered, s.Failed)
	fmt.Fprintf(w, "  hub, whole fleet connected, before -> after: PSS %d -> %d KiB (%.2fx), RSS %d -> %d KiB, Go heap in use %d -> %d KiB (%.2fx), live after GC %d -> %d KiB (%.2fx), goroutines %d -> %d (%.2fx), descriptors %d -> %d (%.2fx); panics contained: %d\n",
		s.Start.PSSKiB, s.End.PSSKiB, s.PSSGrowth, s.Start.RSSKiB, s.End.RSSKiB, s.Start.HeapInuseKiB, s.End.HeapInuseKiB, s.HeapGrowth, s.Start.HeapLiveKiB, s.End.HeapLiveKiB, s.LiveGrowth,
		s.Start.Goroutines, s.End.Goroutines, s.GoroutinesGrowth, s.Start.Files, s.End.Files, s.FilesGrowth, s.End.Panics)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>A hub under a churning fleet</h1>
<p class="note">{{template "env" .Env}}.
{{.S.Options.Devices}} real agent processes on one hub (a third each multiplexed, with an SSH channel per connection, and compressed); every {{.S.Options.EveryS}} s, {{f "%.0f" (pct .S.Options.KillShare)}}% of them were SIGKILLed (often while the hub opened one of their connections) and started again at once, for {{.S.Options.DurationS}} s, while {{.S.Options.Requesters}} requesters went through every device's protected socket.</p>
<p>The hub {{if .S.HubAlive}}stayed up{{else}}<b>died</b>{{end}}.</p>
<table><tr><th>kills</th><th>back p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th>not back</th><th>requests answered</th><th>not answered</th></tr>
<tr><td>{{.S.Kills}}</td><td>{{f "%.0f" .S.Back.P50}}</td><td>{{f "%.0f" .S.Back.P90}}</td><td>{{f "%.0f" .S.Back.P99}}</td><td>{{f "%.0f" .S.Back.Max}}</td><td>{{.S.Back.Missing}}</td><td>{{.S.Answered}}</td><td>{{.S.Failed}}</td></tr></table>
<table><tr><th>hub (whole fleet connected)</th><th>PSS KiB</th><th>RSS KiB</th><th>Go heap in use KiB</th><th>live after GC KiB</th><th>goroutines</th><th>descriptors</th><th>panics contained</th></tr>
<tr><td>before the churn</td><td>{{.S.Start.PSSKiB}}</td><td>{{.S.Start.RSSKiB}}</td><td>{{.S.Start.HeapInuseKiB}}</td><td>{{.S.Start.HeapLiveKiB}}</td><td>{{.S.Start.Goroutines}}</td><td>{{.S.Start.Files}}</td><td>{{.S.Start.Panics}}</td></tr>
<tr><td>after the churn</td><td>{{.S.End.PSSKiB}}</td><td>{{.S.End.RSSKiB}}</td><td>{{.S.End.HeapInuseKiB}}</td><td>{{.S.End.HeapLiveKiB}}</td><td>{{.S.End.Goroutines}}</td><td>{{.S.End.Files}}</td><td>{{.S.End.Panics}}</td></tr>
<tr><td>end / start</td><td>{{f "%.2fx" .S.PSSGrowth}}</td><td>–</td><td>{{f "%.2fx" .S.HeapGrowth}}</td><td>{{f "%.2fx" .S.LiveGrowth}}</td><td>{{f "%.2fx" .S.GoroutinesGrowth}}</td><td>{{f "%.2fx" .S.FilesGrowth}}</td><td></td></tr></table>
<p class="note">Both footprints are taken with the whole fleet connected and after one request through every device, so that every session's buffers (and every compressed session's deflate state) exist in both. Pages Go keeps after a peak show in PSS; a leak shows in the heap in use, goroutines or descriptors. Back: from the killed agent's new process starting to its session being ready with its reverse forward registered (the hub may first take over the dead session). Raw data: kills.csv (per kill), summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`, template.FuncMap{"pct": func(v float64) float64 { return 100 * v }})
