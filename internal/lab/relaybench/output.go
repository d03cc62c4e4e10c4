package relaybench

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
// cut short (ctx cancelled) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench relay: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && len(res.Reps) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema  string        `json:"schema"`
	Options optionsJSON   `json:"options"`
	Reps    []repJSON     `json:"reps"`
	Median  medianSummary `json:"median"`
}

type optionsJSON struct {
	Gateways      int  `json:"gateways"`
	Devices       int  `json:"devices_per_gateway"`
	Notifications int  `json:"notifications_per_gateway"`
	Clients       int  `json:"direct_clients"`
	Reps          int  `json:"reps"`
	Quick         bool `json:"quick"`
}

type phaseJSON struct {
	Notifications int     `json:"notifications"`
	Arrived       int     `json:"arrived"`
	Duplicates    int     `json:"duplicates"`
	ElapsedS      float64 `json:"elapsed_s"`
	PerS          float64 `json:"per_s"`
	CentreCPUUs   float64 `json:"centre_cpu_us_per_notification"`
	SenderCPUUs   float64 `json:"gateway_cpu_us_per_notification,omitempty"`
}

type repJSON struct {
	Rep    int       `json:"rep"`
	Relay  phaseJSON `json:"relay"`
	Direct phaseJSON `json:"direct"`
}

// medianSummary compares the two paths over the repetitions: rates, and the centre's
// CPU per relayed notification as a share of its CPU per REST notification.
type medianSummary struct {
	RelayPerS      float64 `json:"relay_per_s"`
	DirectPerS     float64 `json:"direct_per_s"`
	RelayCentreUs  float64 `json:"relay_centre_cpu_us"`
	DirectCentreUs float64 `json:"direct_centre_cpu_us"`
	CentreCPURatio float64 `json:"centre_cpu_relay_over_direct"`
	RelayGatewayUs float64 `json:"relay_gateway_cpu_us"`
	AllArrivedOnce bool    `json:"all_arrived_once"`
}

func phase(p Phase) phaseJSON {
	j := phaseJSON{Notifications: p.Notifications, Arrived: p.Arrived, Duplicates: p.Duplicates, ElapsedS: p.Elapsed.Seconds()}
	if p.Elapsed > 0 {
		j.PerS = float64(p.Arrived) / p.Elapsed.Seconds()
	}
	if p.Arrived > 0 {
		j.CentreCPUUs = float64(p.CentreCPU.Microseconds()) / float64(p.Arrived)
		j.SenderCPUUs = float64(p.SenderCPU.Microseconds()) / float64(p.Arrived)
	}
	return j
}

// Summarize turns results into summary.json's figures.
func Summarize(res Results) Summary {
	o := res.Options
	s := Summary{Schema: "iotsafe-bench-relay/1", Options: optionsJSON{Gateways: o.Gateways, Devices: o.Devices, Notifications: o.Notifications,
		Clients: o.Clients, Reps: o.Reps, Quick: o.Quick}}
	var rp, dp, rc, dc, rg, ratio []float64
	s.Median.AllArrivedOnce = len(res.Reps) > 0
	for _, r := range res.Reps {
		j := repJSON{Rep: r.Rep, Relay: phase(r.Relay), Direct: phase(r.Direct)}
		s.Reps = append(s.Reps, j)
		rp, dp = append(rp, j.Relay.PerS), append(dp, j.Direct.PerS)
		rc, dc, rg = append(rc, j.Relay.CentreCPUUs), append(dc, j.Direct.CentreCPUUs), append(rg, j.Relay.SenderCPUUs)
		if j.Direct.CentreCPUUs > 0 {
			ratio = append(ratio, j.Relay.CentreCPUUs/j.Direct.CentreCPUUs)
		}
		if r.Relay.Arrived != r.Relay.Notifications || r.Relay.Duplicates != 0 {
			s.Median.AllArrivedOnce = false
		}
	}
	s.Median.RelayPerS, s.Median.DirectPerS = lab.Median(rp), lab.Median(dp)
	s.Median.RelayCentreUs, s.Median.DirectCentreUs, s.Median.RelayGatewayUs = lab.Median(rc), lab.Median(dc), lab.Median(rg)
	s.Median.CentreCPURatio = lab.Median(ratio)
	return s
}

// Write writes reps.csv, environment.json, summary.json and report.html into dir.
func Write(dir string, env lab.Environment, res Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := lab.WriteCSV(filepath.Join(dir, "reps.csv"), []string{"rep", "path", "notifications", "arrived", "duplicates", "elapsed_s", "per_s", "centre_cpu_us", "gateway_cpu_us"},
		func(row func(...string)) {
			for _, r := range s.Reps {
				for _, p := range []struct {
					name string
					ph   phaseJSON
				}{{"relay", r.Relay}, {"direct", r.Direct}} {
					row(fmt.Sprint(r.Rep), p.name, fmt.Sprint(p.ph.Notifications), fmt.Sprint(p.ph.Arrived), fmt.Sprint(p.ph.Duplicates),
						fmt.Sprintf("%.3f", p.ph.ElapsedS), fmt.Sprintf("%.0f", p.ph.PerS), fmt.Sprintf("%.1f", p.ph.CentreCPUUs), fmt.Sprintf("%.1f", p.ph.SenderCPUUs))
				}
			}
		})
	if err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, report, map[string]any{"Title": "iotsafe bench relay", "S": s})
}

var report = lab.NewReport(`{{template "head" .}}
<h1>Gateways' notifications into the centre's store</h1>
<p class="note">{{template "env" .Env}}</p>
<p>{{.S.Options.Gateways}} gateway hubs, each with {{.S.Options.Notifications}} notifications of {{.S.Options.Devices}} devices
stored while the centre was away, relay them into the centre's store over their SSH sessions; then as many
notifications are posted to the centre directly over REST by {{.S.Options.Clients}} clients (devices of the centre,
one keep-alive connection each). CPU is per notification stored at the centre.</p>
<table><tr><th>rep</th><th>path</th><th>notifications</th><th>arrived</th><th>duplicates</th><th>s</th><th>per s</th><th>centre CPU µs</th><th>gateway CPU µs</th></tr>
{{range .S.Reps}}<tr><td>{{.Rep}}</td><td>relay</td><td>{{.Relay.Notifications}}</td><td>{{.Relay.Arrived}}</td><td>{{.Relay.Duplicates}}</td><td>{{f "%.2f" .Relay.ElapsedS}}</td><td>{{f "%.0f" .Relay.PerS}}</td><td>{{f "%.1f" .Relay.CentreCPUUs}}</td><td>{{f "%.1f" .Relay.SenderCPUUs}}</td></tr>
<tr><td>{{.Rep}}</td><td>direct REST</td><td>{{.Direct.Notifications}}</td><td>{{.Direct.Arrived}}</td><td>–</td><td>{{f "%.2f" .Direct.ElapsedS}}</td><td>{{f "%.0f" .Direct.PerS}}</td><td>{{f "%.1f" .Direct.CentreCPUUs}}</td><td>–</td></tr>
{{end}}</table>
<p>Medians: relay {{f "%.0f" .S.Median.RelayPerS}}/s, direct {{f "%.0f" .S.Median.DirectPerS}}/s; the centre's CPU per relayed
notification is {{f "%.2f" .S.Median.CentreCPURatio}}× its CPU per REST notification. Every notification arrived once:
{{.S.Median.AllArrivedOnce}}.</p>
<p class="note">The relay's time runs from starting the gateway hubs (their start included) to the last gateway's mark
reaching its last notification; the direct path's from the first post to the last answer.</p>
</body></html>`)

// Print writes the summary for people.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\n%-4s %-12s %9s %9s %5s %8s %9s %11s %11s\n", "rep", "path", "sent", "arrived", "dups", "s", "per s", "centre µs", "gateway µs")
	for _, r := range s.Reps {
		fmt.Fprintf(w, "%-4d %-12s %9d %9d %5d %8.2f %9.0f %11.1f %11.1f\n", r.Rep, "relay", r.Relay.Notifications, r.Relay.Arrived, r.Relay.Duplicates, r.Relay.ElapsedS, r.Relay.PerS, r.Relay.CentreCPUUs, r.Relay.SenderCPUUs)
		fmt.Fprintf(w, "%-4d %-12s %9d %9d %5s %8.2f %9.0f %11.1f %11s\n", r.Rep, "direct REST", r.Direct.Notifications, r.Direct.Arrived, "-", r.Direct.ElapsedS, r.Direct.PerS, r.Direct.CentreCPUUs, "-")
	}
	fmt.Fprintf(w, "\nmedians: relay %.0f/s, direct %.0f/s; centre CPU per relayed notification %.2fx per REST one; every notification arrived once: %v\n",
		s.Median.RelayPerS, s.Median.DirectPerS, s.Median.CentreCPURatio, s.Median.AllArrivedOnce)
}
