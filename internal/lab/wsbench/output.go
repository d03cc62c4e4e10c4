package wsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench websocket: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && len(res.Reps) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema  string      `json:"schema"`
	Options optionsJSON `json:"options"`
	Reps    []repJSON   `json:"reps"`
	Median  medians     `json:"median"`
}

type optionsJSON struct {
	Notifications int  `json:"notifications"`
	Window        int  `json:"window"`
	Subscribers   int  `json:"subscribers"`
	Reps          int  `json:"reps"`
	Quick         bool `json:"quick"`
}

type pathJSON struct {
	Path          string  `json:"path"`
	Notifications int     `json:"notifications"`
	ElapsedS      float64 `json:"elapsed_s"`
	PerS          float64 `json:"per_s"`
	HubCPUUs      float64 `json:"hub_cpu_us_per_notification"`
}

type holdingJSON struct {
	Kind       string     `json:"kind"`
	Held       int        `json:"held"`
	Base       lab.Memory `json:"base"`
	Holding    lab.Memory `json:"holding"`
	PerHeldKiB float64    `json:"per_held_pss_kib"`
	PerGiB     float64    `json:"held_per_gib"`
}

type repJSON struct {
	Rep      int           `json:"rep"`
	Paths    []pathJSON    `json:"paths"`
	Holdings []holdingJSON `json:"holdings"`
}

// medians over the repetitions: rates and CPU per path, the socket's over REST's,
// and memory per waiting client.
type medians struct {
	PerS                map[string]float64 `json:"per_s"`
	HubCPUUs            map[string]float64 `json:"hub_cpu_us"`
	WSOverREST          float64            `json:"websocket_over_rest_per_s"`
	PipelinedOverREST   float64            `json:"pipelined_over_rest_per_s"`
	PerHeldKiB          map[string]float64 `json:"per_held_pss_kib"`
	PerGiB              map[string]float64 `json:"held_per_gib"`
	SubscriberOverPoll  float64            `json:"subscriber_over_long_poll_memory"`
	EveryNotificationOK bool               `json:"every_notification_stored"`
}

// Summarize turns results into summary.json's figures.
func Summarize(res Results) Summary {
	o := res.Options
	s := Summary{Schema: "iotsafe-bench-websocket/1", Options: optionsJSON{Notifications: o.Notifications, Window: o.Window,
		Subscribers: o.Subscribers, Reps: o.Reps, Quick: o.Quick}}
	rates, cpus, kib, gib := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	var wsRatio, pipeRatio, memRatio []float64
	s.Median.EveryNotificationOK = len(res.Reps) > 0
	for _, r := range res.Reps {
		j := repJSON{Rep: r.Rep}
		per := map[string]float64{}
		for _, p := range r.Paths {
			pj := pathJSON{Path: p.Name, Notifications: p.Notifications, ElapsedS: p.Elapsed.Seconds()}
			if p.Elapsed > 0 {
				pj.PerS = float64(p.Notifications) / p.Elapsed.Seconds()
			}
			if p.Notifications > 0 {
				pj.HubCPUUs = float64(p.HubCPU.Microseconds()) / float64(p.Notifications)
			}
			if p.Notifications != o.Notifications {
				s.Median.EveryNotificationOK = false
			}
			per[p.Name] = pj.PerS
			rates[p.Name], cpus[p.Name] = append(rates[p.Name], pj.PerS), append(cpus[p.Name], pj.HubCPUUs)
			j.Paths = append(j.Paths, pj)
		}
		if per[PathREST] > 0 {
			wsRatio, pipeRatio = append(wsRatio, per[PathWS]/per[PathREST]), append(pipeRatio, per[PathWSWindow]/per[PathREST])
		}
		mem := map[string]float64{}
		for _, h := range r.Holdings {
			hj := holdingJSON{Kind: h.Kind, Held: h.Held, Base: h.Base, Holding: h.Now}
			if h.Held > 0 && h.Now.PSS > h.Base.PSS {
				hj.PerHeldKiB = float64(h.Now.PSS-h.Base.PSS) / float64(h.Held)
				hj.PerGiB = float64(1<<20) / hj.PerHeldKiB
			}
			mem[h.Kind] = hj.PerHeldKiB
			kib[h.Kind], gib[h.Kind] = append(kib[h.Kind], hj.PerHeldKiB), append(gib[h.Kind], hj.PerGiB)
			j.Holdings = append(j.Holdings, hj)
		}
		if mem[HoldLongPoll] > 0 {
			memRatio = append(memRatio, mem[HoldWS]/mem[HoldLongPoll])
		}
		s.Reps = append(s.Reps, j)
	}
	med := func(m map[string][]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			out[k] = lab.Median(v)
		}
		return out
	}
	s.Median.PerS, s.Median.HubCPUUs, s.Median.PerHeldKiB, s.Median.PerGiB = med(rates), med(cpus), med(kib), med(gib)
	s.Median.WSOverREST, s.Median.PipelinedOverREST, s.Median.SubscriberOverPoll = lab.Median(wsRatio), lab.Median(pipeRatio), lab.Median(memRatio)
	return s
}

// Write writes paths.csv, holdings.csv, environment.json, summary.json and report.html.
func Write(dir string, env lab.Environment, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "paths.csv"), []string{"rep", "path", "notifications", "elapsed_s", "per_s", "hub_cpu_us"}, func(row func(...string)) {
		for _, r := range s.Reps {
			for _, p := range r.Paths {
				row(fmt.Sprint(r.Rep), p.Path, fmt.Sprint(p.Notifications), fmt.Sprintf("%.3f", p.ElapsedS), fmt.Sprintf("%.0f", p.PerS), fmt.Sprintf("%.1f", p.HubCPUUs))
			}
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "holdings.csv"), []string{"rep", "kind", "held", "base_pss_kib", "holding_pss_kib", "per_held_kib", "held_per_gib"}, func(row func(...string)) {
		for _, r := range s.Reps {
			for _, h := range r.Holdings {
				row(fmt.Sprint(r.Rep), h.Kind, fmt.Sprint(h.Held), fmt.Sprint(h.Base.PSS), fmt.Sprint(h.Holding.PSS), fmt.Sprintf("%.2f", h.PerHeldKiB), fmt.Sprintf("%.0f", h.PerGiB))
			}
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, report, map[string]any{"Title": "iotsafe bench websocket", "S": s})
}

var report = lab.NewReport(`{{template "head" .}}
<h1>DeviceHive's WebSocket API beside its REST API</h1>
<p class="note">{{template "env" .Env}}</p>
<p>One device stores {{.S.Options.Notifications}} notifications (paper 004's 36-byte UUID) on the hub's plain listener:
over REST on one keep-alive connection, over one WebSocket sending each once the last was answered, and over one
WebSocket with {{.S.Options.Window}} in flight. Then {{.S.Options.Subscribers}} devices each hold a socket with a command
subscription, and then each a REST long poll for its commands instead; memory is the hub's PSS growth per client held.</p>
<table><tr><th>rep</th><th>path</th><th>notifications</th><th>s</th><th>per s</th><th>hub CPU µs each</th></tr>
{{range $r := .S.Reps}}{{range .Paths}}<tr><td>{{$r.Rep}}</td><td>{{.Path}}</td><td>{{.Notifications}}</td><td>{{f "%.2f" .ElapsedS}}</td><td>{{f "%.0f" .PerS}}</td><td>{{f "%.1f" .HubCPUUs}}</td></tr>
{{end}}{{end}}</table>
<table><tr><th>rep</th><th>held</th><th>clients</th><th>PSS before</th><th>holding</th><th>per client</th><th>per GiB</th></tr>
{{range $r := .S.Reps}}{{range .Holdings}}<tr><td>{{$r.Rep}}</td><td>{{.Kind}}</td><td>{{.Held}}</td><td>{{.Base.PSS}} KiB</td><td>{{.Holding.PSS}} KiB</td><td>{{f "%.1f KiB" .PerHeldKiB}}</td><td>{{f "%.0f" .PerGiB}}</td></tr>
{{end}}{{end}}</table>
<p>Medians: one socket stores {{f "%.2f" .S.Median.WSOverREST}}× REST's rate ({{f "%.2f" .S.Median.PipelinedOverREST}}× pipelined);
a subscriber costs {{f "%.2f" .S.Median.SubscriberOverPoll}}× a long poll's memory. Every notification stored: {{.S.Median.EveryNotificationOK}}.</p>
<p class="note">A long poll must be sent again after each answer or waitTimeout (60 s); a subscription is held until the socket closes. Kernel socket buffers are not in PSS.</p>
</body></html>`)

// Print writes the summary for people.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\n%-4s %-22s %9s %8s %9s %11s\n", "rep", "path", "sent", "s", "per s", "hub CPU µs")
	for _, r := range s.Reps {
		for _, p := range r.Paths {
			fmt.Fprintf(w, "%-4d %-22s %9d %8.2f %9.0f %11.1f\n", r.Rep, p.Path, p.Notifications, p.ElapsedS, p.PerS, p.HubCPUUs)
		}
	}
	fmt.Fprintf(w, "\n%-4s %-16s %7s %12s %12s %10s %9s\n", "rep", "held", "clients", "PSS before", "holding", "per client", "per GiB")
	for _, r := range s.Reps {
		for _, h := range r.Holdings {
			fmt.Fprintf(w, "%-4d %-16s %7d %8d KiB %8d KiB %6.1f KiB %9.0f\n", r.Rep, h.Kind, h.Held, h.Base.PSS, h.Holding.PSS, h.PerHeldKiB, h.PerGiB)
		}
	}
	fmt.Fprintf(w, "\nmedians: one WebSocket %.2fx REST's notifications/s (pipelined %.2fx); a subscriber %.2fx a long poll's memory, %.0f subscribers per GiB; every notification stored: %v\n",
		s.Median.WSOverREST, s.Median.PipelinedOverREST, s.Median.SubscriberOverPoll, s.Median.PerGiB[HoldWS], s.Median.EveryNotificationOK)
}
