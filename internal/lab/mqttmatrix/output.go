package mqttmatrix

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Write writes runs.csv, cells.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, r Result, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	if err := lab.WriteCSV(filepath.Join(dir, "runs.csv"), []string{"link", "broker", "tls", "suite", "negotiated", "mqtt", "qos", "rep",
		"ratio", "total_run_time_s", "avg_run_time_s", "msg_time_min_ms", "msg_time_max_ms", "msg_time_mean_avg_ms", "msg_time_mean_std_ms",
		"avg_bandwidth_msgs_per_sec", "total_bandwidth_msgs_per_sec", "connect_mean_ms", "p5_ms", "p25_ms", "p50_ms", "p75_ms", "p95_ms", "errors"}, func(w func(...string)) {
		for _, run := range r.Runs {
			t := run.Totals
			var errs []string
			for e, n := range run.Errors {
				errs = append(errs, fmt.Sprintf("%d x %s", n, e))
			}
			w(run.Link, run.Broker, run.TLS, run.Suite, run.Negotiated, run.MQTT, fmt.Sprint(run.QoS), fmt.Sprint(run.Rep+1),
				f3(t.Ratio), f3(t.TotalRunTime), f3(t.AvgRunTime), f3(t.MsgTimeMin), f3(t.MsgTimeMax), f3(t.MsgTimeMeanAvg), f3(t.MsgTimeMeanStd),
				f3(t.AvgMsgsPerSec), f3(t.TotalMsgsPerSec), f3(t.ConnectMeanMs), f3(t.P[0]), f3(t.P[1]), f3(t.P[2]), f3(t.P[3]), f3(t.P[4]), strings.Join(errs, "; "))
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "cells.csv"), []string{"link", "broker", "tls", "suite", "negotiated", "mqtt", "qos", "runs",
		"ratio", "total_bandwidth_msgs_per_sec", "avg_bandwidth_msgs_per_sec", "msg_time_mean_avg_ms", "p5_ms", "p25_ms", "p50_ms", "p75_ms", "p95_ms", "connect_mean_ms"}, func(w func(...string)) {
		for _, c := range s.Cells {
			p := c.Percentiles
			w(c.Link, c.Broker, c.TLS, c.Suite, c.Negotiated, c.MQTT, fmt.Sprint(c.QoS), fmt.Sprint(c.Runs), f3(c.Ratio), f3(c.TotalBandwidth), f3(c.AvgBandwidth),
				f3(c.MsgTimeMeanAvg), f3(p[0]), f3(p[1]), f3(p[2]), f3(p[3]), f3(p[4]), f3(c.ConnectMs))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench mqtt matrix", "Wide": true, "S": s, "Links": linkViews(r.Options, s)})
}

// linkView is one link's part of the report.
type linkView struct {
	Link   string
	Tables []bandwidthTable
	Boxes  []template.HTML
}

// bandwidthTable is figs. 6, 8-11, 13-16: total bandwidth per suite, MQTT version,
// broker and QoS, for one TLS version ("" for plain and the SSH path).
type bandwidthTable struct {
	TLS    string
	Header []string
	Rows   [][]string
}

func linkViews(o Options, s Summary) []linkView {
	cells := map[Cell]CellSummary{}
	for _, c := range s.Cells {
		cells[c.Cell] = c
	}
	var views []linkView
	for _, link := range o.Links {
		v := linkView{Link: link}
		for _, version := range append([]string{""}, o.TLS...) {
			var brokers []string
			for _, b := range o.Brokers {
				if (version == "") == (b == Plain || b == SSH) {
					brokers = append(brokers, b)
				}
			}
			if len(brokers) == 0 {
				continue
			}
			t := bandwidthTable{TLS: version, Header: []string{"suite", "MQTT"}}
			for _, b := range brokers {
				for _, q := range o.QoS {
					t.Header = append(t.Header, fmt.Sprintf("%s QoS %d", b, q))
				}
			}
			suites := []string{""}
			if version != "" {
				suites = nil
				for _, n := range o.Suites {
					if sp, err := parseSuite(n); err == nil && sp.TLS13 == (version == "1.3") {
						suites = append(suites, sp.Name)
					}
				}
			}
			for _, su := range suites {
				for _, mv := range o.MQTT {
					row := []string{su, mv}
					if su == "" {
						row[0] = "(none)"
					}
					for _, b := range brokers {
						for _, q := range o.QoS {
							cs, ok := cells[Cell{Link: link, Broker: b, TLS: version, Suite: su, MQTT: mv, QoS: q}]
							row = append(row, fmtCell(cs, ok))
						}
					}
					t.Rows = append(t.Rows, row)
				}
			}
			v.Tables = append(v.Tables, t)
		}
		// Delay distributions at QoS 0 (figs. 5, 12, 17): per broker, TLS and MQTT version.
		for _, b := range o.Brokers {
			for _, version := range o.TLS {
				for _, mv := range o.MQTT {
					var boxes []lab.Box
					for _, c := range s.Cells {
						if c.Link == link && c.Broker == b && c.TLS == version && c.MQTT == mv && c.QoS == 0 {
							boxes = append(boxes, lab.Box{Label: c.Suite, P: c.Percentiles})
						}
					}
					title := fmt.Sprintf("%s, %s: message time, TLS %s, QoS 0, MQTT %s", link, b, version, mv)
					if chart := lab.BoxPlot(title, "ms", boxes); chart != "" {
						v.Boxes = append(v.Boxes, chart)
					}
				}
			}
		}
		views = append(views, v)
	}
	return views
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\nmatrix: %d cells run (%d clients x %d messages of %d bytes, %d repetitions, medians), %d skipped\n",
		len(s.Cells), s.Clients, s.Messages, s.Payload, s.Reps, len(s.Skips))
	for _, t := range s.Targets {
		verdict := lab.Verdict(t.Met)
		if t.Cells == 0 {
			fmt.Fprintf(w, "  %s: no cell both the hub and Mosquitto ran\n", t.Link)
		} else {
			fmt.Fprintf(w, "  %s: hub / Mosquitto total bandwidth over %d common cells: geometric mean %.2f, lowest %.2f (%s); %d below 1 — %s\n",
				t.Link, t.Cells, t.GeoMeanRatio, t.MinRatio, t.Worst, t.Below, verdict)
		}
		if t.SSHOverPlain > 0 {
			fmt.Fprintf(w, "  %s: the SSH path / plain MQTT: %.2f\n", t.Link, t.SSHOverPlain)
		}
	}
	for _, r := range s.Table2 {
		fmt.Fprintf(w, "  table 2 %s %s MQTT %s TLS %s: best %s %.0f msg/s, worst %s %.0f msg/s\n", r.Link, r.Broker, r.MQTT, r.TLS, r.Best, r.BestV, r.Worst, r.WorstV)
	}
	for _, c := range s.Cells {
		if len(c.Errors) > 0 {
			fmt.Fprintf(w, "  %s: failures: %s\n", c.Cell, strings.Join(c.Errors, "; "))
		}
	}
	verdict := lab.Verdict(s.TargetMet)
	fmt.Fprintf(w, "target (the hub's broker >= Mosquitto at every common cell): %s\n", verdict)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>MQTT over TLS: suites x QoS x MQTT version x link (paper 002)</h1>
<p class="note">{{template "env" .Env}}.
Each run: {{.S.Clients}} clients at once, each publishing {{.S.Messages}} messages of {{.S.Payload}} bytes one after the other (the next once the broker acknowledged the last, at the run's QoS), a full TLS handshake per client; metrics as mqtt-benchmark's; {{.S.Reps}} repetitions per cell, medians. Brokers: Debian's Mosquitto (OpenSSL) and the hub's (Go crypto/tls), both checking a password per client; "plain" is Mosquitto without TLS (the ceiling), "ssh" the hub's plain listener through the device's agent (one SSH session). Mosquitto {{if .S.MosquittoNoDelay}}ran with Nagle's algorithm off (set_tcp_nodelay true, --mosquitto-nodelay), as the hub{{else}}ran with its default, Nagle's algorithm on: its TLS 1.3 connections wait 40-50 ms for the client's delayed ACK, which counts in the runtime (--mosquitto-nodelay turns it off){{end}}.</p>
<h2>Target: the hub's broker at or above Mosquitto — <b>{{if .S.TargetMet}}met{{else}}not met{{end}}</b></h2>
<table><tr><th>link</th><th>common cells</th><th>hub below Mosquitto</th><th>geometric mean hub/Mosquitto</th><th>lowest</th><th>at</th><th>SSH path / plain</th></tr>
{{range .S.Targets}}<tr><td>{{.Link}}</td><td>{{.Cells}}</td><td>{{.Below}}</td><td>{{f "%.2f" .GeoMeanRatio}}</td><td>{{f "%.2f" .MinRatio}}</td><td>{{.Worst}}</td><td>{{if .SSHOverPlain}}{{f "%.2f" .SSHOverPlain}}{{end}}</td></tr>{{end}}
</table>
<h2>Table 2: best and worst suite by total bandwidth at QoS 0</h2>
<table><tr><th>link</th><th>broker</th><th>MQTT</th><th>TLS</th><th>best</th><th>msg/s</th><th>worst</th><th>msg/s</th></tr>
{{range .S.Table2}}<tr><td>{{.Link}}</td><td>{{.Broker}}</td><td>{{.MQTT}}</td><td>{{.TLS}}</td><td>{{.Best}}</td><td>{{f "%.0f" .BestV}}</td><td>{{.Worst}}</td><td>{{f "%.0f" .WorstV}}</td></tr>{{end}}
</table>
<p class="note">The paper's (Mosquitto on a Raspberry Pi 4 behind an OpenWrt router, mqtt-benchmark; its TLS 1.3 rows name TLS 1.2 suites as printed):</p>
<table><tr><th>medium</th><th>MQTT</th><th>TLS</th><th>best</th><th>msg/s</th><th>worst</th><th>msg/s</th></tr>
{{range .S.Paper}}<tr><td>{{.Link}}</td><td>{{.MQTT}}</td><td>{{.TLS}}</td><td>{{.Best}}</td><td>{{f "%.0f" .BestV}}</td><td>{{.Worst}}</td><td>{{f "%.0f" .WorstV}}</td></tr>{{end}}
</table>
{{range .Links}}<h2>{{.Link}}</h2>
{{range .Tables}}<h3>{{if .TLS}}TLS {{.TLS}}{{else}}Without TLS and over SSH{{end}}: total bandwidth, msg/s (figs. 6, 8–11, 13–16)</h3>
<table><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
{{end}}
{{range .Boxes}}{{.}}{{end}}
{{end}}
{{if .S.Skips}}<h2>Cells not run</h2>
<table><tr><th>link</th><th>broker</th><th>TLS</th><th>suite</th><th>why</th></tr>
{{range .S.Skips}}<tr><td>{{.Link}}</td><td>{{.Broker}}</td><td>{{.TLS}}</td><td>{{.Suite}}</td><td>{{.Reason}}</td></tr>{{end}}
</table>{{end}}
<p class="note">Paper 002 measured on Raspberry Pi 4 brokers over real Ethernet, Wi-Fi and LTE; here both brokers share this machine with the load generator, and links are the lab's emulator (docs/bench.md): compare the ranking and the ratios, not the absolute numbers. Raw data: runs.csv, cells.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`)
