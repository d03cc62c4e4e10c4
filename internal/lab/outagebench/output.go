package outagebench

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/lab"
)

// TargetWithin is issue 21.4's target: every device back within 10 s of the hub.
const TargetWithin = 10 * time.Second

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench outage: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && len(res.Reps) == 0 && res.FirstConnect == nil {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema       string       `json:"schema"`
	Options      optionsJSON  `json:"options"`
	FirstConnect Dist         `json:"first_connect_ms"`
	Reps         []RepSummary `json:"reps"`
	Target       Target       `json:"target"`
}

type optionsJSON struct {
	Devices     int     `json:"devices"`
	DownS       float64 `json:"down_s"`
	Reps        int     `json:"reps"`
	RecentMaxS  float64 `json:"recent_max_s"`
	TimeoutS    float64 `json:"timeout_s"`
	Quick       bool    `json:"quick"`
	EvenRatePer float64 `json:"even_attempts_per_s"` // the fleet's attempt rate if evenly spread
}

// Dist summarizes per-device times in milliseconds (the lab's).
type Dist = lab.Dist

// RepSummary is one outage.
type RepSummary struct {
	Rep        int     `json:"rep"`
	HubStartMS float64 `json:"hub_start_ms"`
	Back       Dist    `json:"back_ms"`
	// WithinTarget is the share of devices back within TargetWithin.
	WithinTarget float64 `json:"back_within_target"`
	// OutageAttemptsPerDeviceS counts connects while the hub was down (all failed), per
	// device and second.
	OutageAttemptsPerDeviceS float64 `json:"outage_attempts_per_device_s"`
	// PeakAttempts is the most connects in one second from the kill until the fleet was
	// back (the herd, if any), and its ratio to an even spread (Options.EvenRatePer).
	PeakAttempts int     `json:"peak_attempts_per_s"`
	PeakOverEven float64 `json:"peak_over_even"`
	// PeakAfterBack is the same from the hub listening again: the load it meets.
	PeakAfterBack         int     `json:"peak_attempts_per_s_after_back"`
	PeakAfterBackOverEven float64 `json:"peak_after_back_over_even"`
	HubCPUMS              float64 `json:"hub_cpu_ms"`
	HubCPUPerDeviceMS     float64 `json:"hub_cpu_ms_per_device"`
	// Bins are connects per second from the kill, keyed by the second relative to the
	// hub listening again.
	Bins map[int]int `json:"attempts_by_second"`
}

// Target is issue 21.4's: every device back within 10 s of the hub returning.
type Target struct {
	WithinS    float64 `json:"within_s"`
	WorstMaxMS float64 `json:"worst_max_ms"`
	Missing    int     `json:"missing"`
	Met        bool    `json:"met"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dist summarizes readings; negative ones are missing devices.
func dist(ds []time.Duration) Dist { return lab.DistOf(ds) }

// Summarize computes the summary of a run.
func Summarize(r *Results) Summary {
	o := r.Options
	recent := o.RecentMax
	if recent == 0 {
		recent = agent.DefaultRecentMax
	}
	// Each device retries every U(RecentMax/2, RecentMax): 0.75 RecentMax on average.
	even := float64(o.Devices) / (0.75 * recent.Seconds())
	s := Summary{Schema: "iotsafe.bench.outage/1", FirstConnect: dist(r.FirstConnect),
		Options: optionsJSON{Devices: o.Devices, DownS: o.Down.Seconds(), Reps: o.Reps, RecentMaxS: recent.Seconds(),
			TimeoutS: o.Timeout.Seconds(), Quick: o.Quick, EvenRatePer: even},
		Target: Target{WithinS: TargetWithin.Seconds(), Met: len(r.Reps) > 0}}
	for _, rep := range r.Reps {
		rs := RepSummary{Rep: rep.Rep, HubStartMS: ms(rep.HubStart), Back: dist(rep.Back), HubCPUMS: ms(rep.HubCPU), Bins: map[int]int{}}
		within := 0
		for _, d := range rep.Back {
			if d >= 0 && d <= TargetWithin {
				within++
			}
		}
		if len(rep.Back) > 0 {
			rs.WithinTarget = float64(within) / float64(len(rep.Back))
		}
		outage := 0
		for _, a := range rep.Attempts {
			sec := int(math.Floor(a.Seconds()))
			rs.Bins[sec]++
			if a < 0 {
				outage++
			}
		}
		for sec, n := range rs.Bins {
			rs.PeakAttempts = max(rs.PeakAttempts, n)
			if sec >= 0 {
				rs.PeakAfterBack = max(rs.PeakAfterBack, n)
			}
		}
		if o.Devices > 0 {
			rs.HubCPUPerDeviceMS = rs.HubCPUMS / float64(o.Devices)
		}
		if o.Devices > 0 && o.Down > 0 {
			rs.OutageAttemptsPerDeviceS = float64(outage) / float64(o.Devices) / o.Down.Seconds()
		}
		if even > 0 {
			rs.PeakOverEven = float64(rs.PeakAttempts) / even
			rs.PeakAfterBackOverEven = float64(rs.PeakAfterBack) / even
		}
		s.Reps = append(s.Reps, rs)
		s.Target.WorstMaxMS = max(s.Target.WorstMaxMS, rs.Back.Max)
		s.Target.Missing += rs.Back.Missing
		if rs.WithinTarget < 1 {
			s.Target.Met = false
		}
	}
	return s
}

// Write writes back.csv, attempts.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	if err := lab.WriteCSV(filepath.Join(dir, "back.csv"), []string{"phase", "device", "ms"}, func(w func(...string)) {
		row := func(phase string, ds []time.Duration) {
			for i, d := range ds {
				v := "missing"
				if d >= 0 {
					v = f3(ms(d))
				}
				w(phase, fmt.Sprintf("dev%d", i), v)
			}
		}
		row("first_connect", r.FirstConnect)
		for _, rep := range r.Reps {
			row(fmt.Sprintf("outage%d", rep.Rep), rep.Back)
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "attempts.csv"), []string{"outage", "second_after_hub_back", "attempts"}, func(w func(...string)) {
		for _, rs := range s.Reps {
			secs := make([]int, 0, len(rs.Bins))
			for sec := range rs.Bins {
				secs = append(secs, sec)
			}
			slices.Sort(secs)
			for _, sec := range secs {
				w(fmt.Sprint(rs.Rep), fmt.Sprint(sec), fmt.Sprint(rs.Bins[sec]))
			}
		}
	}); err != nil {
		return err
	}
	f, err := lab.WriteRunFiles(dir, env, s)
	if err != nil {
		return err
	}
	defer f.Close()
	var charts []template.HTML
	for _, rep := range r.Reps {
		charts = append(charts, lab.LineChart(fmt.Sprintf("Outage %d: devices back after the hub", rep.Rep), "seconds after the hub listens again", "% of devices back",
			[]lab.Series{cdf("devices", rep.Back)}, false))
	}
	return reportTmpl.Execute(f, map[string]any{"Title": "iotsafe bench outage", "Env": env, "S": s, "Charts": charts})
}

// cdf is the share of devices back by each tenth of the fleet (missing ones never are).
func cdf(name string, ds []time.Duration) lab.Series {
	var v []float64
	for _, d := range ds {
		if d >= 0 {
			v = append(v, d.Seconds())
		}
	}
	slices.Sort(v)
	s := lab.Series{Name: name}
	for i := 1; i <= 10 && len(v) > 0; i++ {
		k := max(1, i*len(v)/10)
		s.X = append(s.X, math.Round(v[k-1]*100)/100)
		s.Y = append(s.Y, 100*float64(k)/float64(len(ds)))
	}
	return s
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	o := s.Options
	fmt.Fprintf(w, "\n%d devices, hub down %gs (SIGKILL), %d outage(s); agents retry every %gs at most after a lost session\n", o.Devices, o.DownS, o.Reps, o.RecentMaxS)
	fc := s.FirstConnect
	fmt.Fprintf(w, "  cold start, every agent at once: p50 %.0f ms, p99 %.0f ms, max %.0f ms%s\n", fc.P50, fc.P99, fc.Max, missing(fc.Missing))
	for _, r := range s.Reps {
		b := r.Back
		fmt.Fprintf(w, "  outage %d: hub listening %.0f ms after its restart; devices back p50 %.0f ms, p90 %.0f, p99 %.0f, max %.0f%s; %.1f%% within %gs\n",
			r.Rep, r.HubStartMS, b.P50, b.P90, b.P99, b.Max, missing(b.Missing), 100*r.WithinTarget, s.Target.WithinS)
		fmt.Fprintf(w, "    connects while down: %.2f per device per second; busiest second: %d connects (%.2fx an even spread of %.0f/s), after the hub was back %d (%.2fx); hub CPU %.0f ms (%.1f ms per device)\n",
			r.OutageAttemptsPerDeviceS, r.PeakAttempts, r.PeakOverEven, o.EvenRatePer, r.PeakAfterBack, r.PeakAfterBackOverEven, r.HubCPUMS, r.HubCPUPerDeviceMS)
	}
	verdict := lab.Verdict(s.Target.Met)
	fmt.Fprintf(w, "target (every device back within %gs of the hub): %s, worst %.0f ms%s\n", s.Target.WithinS, verdict, s.Target.WorstMaxMS, missing(s.Target.Missing))
}

func missing(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d NOT BACK", n)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>Back after a hub outage</h1>
<p class="note">{{template "env" .Env}}.
{{.S.Options.Devices}} agents (in the bench's process, each with its own key and session) on one hub, killed with SIGKILL and kept down {{.S.Options.DownS}} s, then restarted on the same data folder and address. After a lost session an agent retries every U({{f "%g" .S.Options.RecentMaxS}}/2, {{f "%g" .S.Options.RecentMaxS}}) s for five minutes: an even spread is {{f "%.0f" .S.Options.EvenRatePer}} attempts/s for the fleet.</p>
<p>Target: every device back within {{.S.Target.WithinS}} s of the hub listening again — <b>{{if .S.Target.Met}}met{{else}}not met{{end}}</b> (worst {{f "%.0f" .S.Target.WorstMaxMS}} ms{{if .S.Target.Missing}}, {{.S.Target.Missing}} not back{{end}}).</p>
<table><tr><th>phase</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th>not back</th><th>within target</th><th>connects while down /device/s</th><th>busiest second</th><th>over an even spread</th><th>busiest second after the hub was back</th><th>over an even spread</th><th>hub start ms</th><th>hub CPU ms per device</th></tr>
<tr><td>cold start (all at once)</td><td>{{f "%.0f" .S.FirstConnect.P50}}</td><td>{{f "%.0f" .S.FirstConnect.P90}}</td><td>{{f "%.0f" .S.FirstConnect.P99}}</td><td>{{f "%.0f" .S.FirstConnect.Max}}</td><td>{{.S.FirstConnect.Missing}}</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td></tr>
{{range .S.Reps}}<tr><td>outage {{.Rep}}</td><td>{{f "%.0f" .Back.P50}}</td><td>{{f "%.0f" .Back.P90}}</td><td>{{f "%.0f" .Back.P99}}</td><td>{{f "%.0f" .Back.Max}}</td><td>{{.Back.Missing}}</td><td>{{f "%.1f%%" (pct .WithinTarget)}}</td><td>{{f "%.2f" .OutageAttemptsPerDeviceS}}</td><td>{{.PeakAttempts}}</td><td>{{f "%.2fx" .PeakOverEven}}</td><td>{{.PeakAfterBack}}</td><td>{{f "%.2fx" .PeakAfterBackOverEven}}</td><td>{{f "%.0f" .HubStartMS}}</td><td>{{f "%.1f" .HubCPUPerDeviceMS}}</td></tr>{{end}}</table>
{{range .Charts}}{{.}}{{end}}
<p class="note">Back: from the hub listening again to the device's session being ready with its reverse forward registered. Connects: every connect the agents made, failed (while the hub was down) or not. Raw data: back.csv (per device), attempts.csv (per second), summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`, template.FuncMap{"pct": func(v float64) float64 { return 100 * v }})
