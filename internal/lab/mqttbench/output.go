package mqttbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Options of `iotsafe bench mqtt`.
type Options struct {
	Bridge BridgeOptions
	Quick  bool
}

// Run runs the experiments, writes the result files into out and prints the summary
// on w.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench mqtt: results in %s\n", out)
	o.Bridge.Quick = o.Bridge.Quick || o.Quick
	res, err := Bridge(ctx, b, o.Bridge)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	s := Summarize(res)
	if werr := Write(out, lab.ReadEnvironment(o.Quick), res, s); werr != nil {
		return werr
	}
	Print(w, s)
	fmt.Fprintf(w, "\nreport: %s\n", filepath.Join(out, "report.html"))
	return nil
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema string        `json:"schema"`
	Bridge BridgeSummary `json:"bridge"`
}

// BridgeSummary is the bridge experiment's part.
type BridgeSummary struct {
	Messages      int      `json:"messages"`
	Publishers    int      `json:"publishers"`
	Outages       int      `json:"outages"`
	DownS         float64  `json:"down_s"`
	Signal        string   `json:"signal"`
	Quick         bool     `json:"quick"`
	Published     int      `json:"published"` // acknowledged by the hub
	PublishErrors []string `json:"publish_errors,omitempty"`
	CentreAcked   int      `json:"centre_acked"` // sends the centre acknowledged to the bridge
	Received      int      `json:"received"`     // distinct, at the reader
	Lost          int      `json:"lost"`
	Duplicates    int      `json:"duplicates"`
	OutOfOrder    int      `json:"out_of_order"`
	ElapsedS      float64  `json:"elapsed_s"`
	// ThroughputPerS is readings a second end to end, outages included.
	ThroughputPerS float64   `json:"throughput_per_s"`
	PeakQueue      int       `json:"peak_queue"`
	FlowAgainS     []float64 `json:"flow_again_s"` // per outage: restart of the centre to the next reading there
	Bridge         string    `json:"bridge_status"`
	ReaderRestarts int       `json:"reader_restarts"`
	// TargetMet: 0 lost (issue 14: 100,000 QoS 1 readings, the centre stopped twice).
	TargetMet bool `json:"target_met"`
}

// Summarize computes the summary of a run.
func Summarize(r BridgeResult) Summary {
	o := r.Options
	sig := "SIGTERM"
	if o.Kill {
		sig = "SIGKILL"
	}
	s := BridgeSummary{Messages: o.Messages, Publishers: o.Publishers, Outages: o.Outages, DownS: o.Down.Seconds(), Signal: sig, Quick: o.Quick,
		Published: r.Published, CentreAcked: r.CentreAcked, PublishErrors: r.PublishErrors, Received: r.Received, Lost: r.Lost, Duplicates: r.Duplicates,
		OutOfOrder: r.OutOfOrder, ElapsedS: r.Elapsed.Seconds(), PeakQueue: r.PeakQueue, Bridge: r.Bridge, ReaderRestarts: r.ReaderRestarts}
	if r.Elapsed > 0 {
		s.ThroughputPerS = float64(r.Received) / r.Elapsed.Seconds()
	}
	for _, out := range r.Outages {
		s.FlowAgainS = append(s.FlowAgainS, out.FlowAgain.Seconds())
	}
	s.TargetMet = r.Lost == 0 && r.Published == o.Messages && len(r.Outages) == o.Outages
	return Summary{Schema: "iotsafe.bench.mqtt/1", Bridge: s}
}

// Write writes outages.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, r BridgeResult, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "outages.csv"), []string{"outage", "at_s", "down_s", "flow_again_s"}, func(w func(...string)) {
		for i, o := range r.Outages {
			w(fmt.Sprint(i+1), fmt.Sprintf("%.3f", o.At.Seconds()), fmt.Sprintf("%.3f", o.Down.Seconds()), fmt.Sprintf("%.3f", o.FlowAgain.Seconds()))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench mqtt", "S": s.Bridge})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	b := s.Bridge
	fmt.Fprintf(w, "\nbridge: %d QoS 1 readings from %d devices through the hub's bridge to Mosquitto, stopped (%s) %d times for %gs\n",
		b.Messages, b.Publishers, b.Signal, b.Outages, b.DownS)
	fmt.Fprintf(w, "  acknowledged by the hub %d; by the centre to the bridge %d (sends); at the reader %d distinct, %d lost, %d duplicates, %d out of order\n",
		b.Published, b.CentreAcked, b.Received, b.Lost, b.Duplicates, b.OutOfOrder)
	if b.Lost > 0 && b.CentreAcked >= b.Published {
		fmt.Fprintf(w, "  the centre acknowledged every reading to the bridge: the loss is Mosquitto's (what it acknowledged but neither saved nor delivered when it was killed)\n")
	}
	fmt.Fprintf(w, "  %.1f s end to end (%.0f readings/s, outages included); queue peak %d; flowing again after each restart in %v s\n",
		b.ElapsedS, b.ThroughputPerS, b.PeakQueue, b.FlowAgainS)
	for _, e := range b.PublishErrors {
		fmt.Fprintf(w, "  publisher failed: %s\n", e)
	}
	verdict := lab.Verdict(b.TargetMet)
	fmt.Fprintf(w, "target (0 lost): %s\n", verdict)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>MQTT: the bridge's store and forward</h1>
<p class="note">{{template "env" .Env}}.
{{.S.Publishers}} devices (mosquitto_pub, one TLS connection each) publish {{.S.Messages}} QoS 1 readings to the site hub; its bridge carries them over TLS to a central Mosquitto, which is stopped with {{.S.Signal}} {{.S.Outages}} times for {{.S.DownS}} s while they do. A reader at the centre (mosquitto_sub, persistent session) checks every reading.</p>
<p>Target (issue 14): 100,000 QoS 1 readings, the centre stopped twice, 0 lost — <b>{{if .S.TargetMet}}met{{else}}not met{{end}}</b>.</p>
<table>
<tr><th>acknowledged by the hub</th><td>{{.S.Published}}</td></tr>
<tr><th>acknowledged by the centre to the bridge (sends)</th><td>{{.S.CentreAcked}}</td></tr>
<tr><th>arrived at the reader (distinct)</th><td>{{.S.Received}}</td></tr>
<tr><th>lost</th><td>{{.S.Lost}}</td></tr>
<tr><th>duplicates (sent again after a lost acknowledgement)</th><td>{{.S.Duplicates}}</td></tr>
<tr><th>out of order (per device)</th><td>{{.S.OutOfOrder}}</td></tr>
<tr><th>end to end, outages included</th><td>{{f "%.1f" .S.ElapsedS}} s, {{f "%.0f" .S.ThroughputPerS}} readings/s</td></tr>
<tr><th>most readings waiting in the bridge's queue</th><td>{{.S.PeakQueue}}</td></tr>
<tr><th>flowing again after each restart of the centre</th><td>{{range .S.FlowAgainS}}{{f "%.2f s " .}}{{end}}</td></tr>
<tr><th>bridge at the end</th><td>{{.S.Bridge}}</td></tr>
<tr><th>reader restarted (mosquitto_sub gave up reconnecting)</th><td>{{.S.ReaderRestarts}}</td></tr>
</table>
<p class="note">With SIGKILL, Mosquitto loses what it acknowledged but had not yet saved or delivered (its persistence is a periodic snapshot): a loss there is the centre's, not the bridge's. Raw data: outages.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`)
