package mqttconns

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run cut
// short still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench mqtt connections: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && len(res.Fleets) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), s) }, func(w io.Writer) { Print(w, s) })
}

// Write writes fleets.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "fleets.csv"), []string{"broker", "clients", "connected", "connect_s", "messages", "acked", "failures",
		"base_pss_kib", "idle_pss_kib", "busy_pss_kib", "quiet_pss_kib", "per_conn_idle_kib", "per_conn_busy_kib", "per_conn_quiet_kib", "messages_per_s", "msg_time_mean_ms", "p50_ms", "p95_ms", "no_loss"}, func(w func(...string)) {
		for _, f := range s.Fleets {
			w(f.Broker, fmt.Sprint(f.Clients), fmt.Sprint(f.Connected), fmt.Sprintf("%.2f", f.ConnectS), fmt.Sprint(f.Messages), fmt.Sprint(f.Acked), fmt.Sprint(f.Failures),
				fmt.Sprint(f.Base.PSS), fmt.Sprint(f.Idle.PSS), fmt.Sprint(f.Busy.PSS), fmt.Sprint(f.Quiet.PSS), fmt.Sprintf("%.2f", f.PerConnIdleKiB), fmt.Sprintf("%.2f", f.PerConnBusyKiB), fmt.Sprintf("%.2f", f.PerConnQuietKiB),
				fmt.Sprintf("%.0f", f.MessagesPerS), fmt.Sprintf("%.3f", f.MsgTimeMean), fmt.Sprintf("%.3f", f.MsgTimeP[2]), fmt.Sprintf("%.3f", f.MsgTimeP[4]), fmt.Sprint(f.NoLoss))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench mqtt connections", "S": s})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	for _, f := range s.Fleets {
		fmt.Fprintf(w, "\n%s: %d of %d devices connected over %s %s in %.1f s\n", f.Broker, f.Connected, f.Clients, f.TLSVersion, f.TLSSuite, f.ConnectS)
		fmt.Fprintf(w, "  readings: %d sent, %d acknowledged, %d failed in %.1f s (%.0f/s; message time mean %.2f ms, p50 %.2f, p95 %.2f)\n",
			f.Messages, f.Acked, f.Failures, f.PublishS, f.MessagesPerS, f.MsgTimeMean, f.MsgTimeP[2], f.MsgTimeP[4])
		fmt.Fprintf(w, "  memory (PSS): %d KiB started, %d KiB with every device idle, %d KiB publishing, %d KiB idle again: %.1f KiB per connection idle, %.1f publishing, %.1f idle again\n",
			f.Base.PSS, f.Idle.PSS, f.Busy.PSS, f.Quiet.PSS, f.PerConnIdleKiB, f.PerConnBusyKiB, f.PerConnQuietKiB)
		var errs []string
		for e, n := range f.Errors {
			errs = append(errs, fmt.Sprintf("%d x %s", n, e))
		}
		if len(errs) > 0 {
			fmt.Fprintf(w, "  failures: %s\n", strings.Join(errs, "; "))
		}
	}
	if s.HubOverMosquittoIdle > 0 {
		fmt.Fprintf(w, "\nhub / Mosquitto memory per connection: %.2f idle, %.2f publishing, %.2f idle again\n", s.HubOverMosquittoIdle, s.HubOverMosquittoBusy, s.HubOverMosquittoQuiet)
	}
	verdict := lab.Verdict(s.TargetMet)
	fmt.Fprintf(w, "target (10,000 devices on the hub, every reading acknowledged): %s\n", verdict)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>MQTT over TLS: a fleet of device connections on one broker</h1>
<p class="note">{{template "env" .Env}}.
{{.S.Clients}} devices connect over TLS (each its own name and secret), then each publishes a QoS 1 reading every {{.S.IntervalS}} s for {{.S.DurationS}} s; the load generator shares the machine with the broker.</p>
<p>Target (issue 14): 10,000 devices on the hub, every reading acknowledged — <b>{{if .S.TargetMet}}met{{else}}not met{{end}}</b>.{{if .S.HubOverMosquittoIdle}} Memory per connection, hub over Mosquitto: {{f "%.2f" .S.HubOverMosquittoIdle}} idle, {{f "%.2f" .S.HubOverMosquittoBusy}} publishing, {{f "%.2f" .S.HubOverMosquittoQuiet}} idle again after publishing.{{end}}</p>
<table><tr><th>broker</th><th>connected</th><th>in</th><th>readings sent</th><th>acknowledged</th><th>failed</th><th>readings/s</th><th>message time p50 / p95</th><th>PSS started</th><th>idle</th><th>publishing</th><th>idle again</th><th>per connection idle</th><th>publishing</th><th>idle again</th></tr>
{{range .S.Fleets}}<tr><td>{{.Broker}}</td><td>{{.Connected}} / {{.Clients}}</td><td>{{f "%.1f s" .ConnectS}}</td><td>{{.Messages}}</td><td>{{.Acked}}</td><td>{{.Failures}}</td><td>{{f "%.0f" .MessagesPerS}}</td><td>{{f "%.2f" (index .MsgTimeP 2)}} / {{f "%.2f ms" (index .MsgTimeP 4)}}</td><td>{{.Base.PSS}} KiB</td><td>{{.Idle.PSS}} KiB</td><td>{{.Busy.PSS}} KiB</td><td>{{.Quiet.PSS}} KiB</td><td>{{f "%.1f KiB" .PerConnIdleKiB}}</td><td>{{f "%.1f KiB" .PerConnBusyKiB}}</td><td>{{f "%.1f KiB" .PerConnQuietKiB}}</td></tr>{{end}}
</table>
<p class="note">Memory is the broker process's proportional set size (PSS), read after it settled: started and idle, with every device connected and idle, the most seen in the second half of publishing, and with every device still connected once publishing ended (idle again); each read after the same wait for both brokers (10 s); per connection is the growth over the first divided by the devices connected. Kernel socket buffers are not in it (alike for both). Raw data: fleets.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`)
