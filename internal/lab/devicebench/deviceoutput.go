package devicebench

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Summary is the device bench's summary.json (schema in docs/bench.md).
type Summary struct {
	Scenario string `json:"scenario"`
	Link     string `json:"link"`
	Quick    bool   `json:"quick"`
	// Per "scheme_proto" (e.g. iotsafe_h1), per file size in bytes.
	Efficiency map[string]map[string]float64 `json:"efficiency"`
	// EfficiencyIP counts IP bytes only (no PHY/MAC/6LoWPAN overhead), as interface
	// counters would; the paper does not say which it measured.
	EfficiencyIP map[string]map[string]float64 `json:"efficiency_ip"`
	Goodput      map[string]map[string]float64 `json:"goodput_bps"`
	LinkBytes    map[string]map[string]float64 `json:"link_bytes_per_request"`
	// Energy of the series over plain HTTP's with the same protocol and size (figs. 13, 14).
	CPUEnergy   map[string]map[string]float64 `json:"cpu_energy_over_plain"`
	RadioEnergy map[string]map[string]float64 `json:"radio_energy_over_plain"`
	Ratios      map[string]float64            `json:"ratios"`
	Paper       map[string]float64            `json:"paper"`
	Skipped     map[string]string             `json:"skipped,omitempty"`
}

// Summarize computes the figures and the targets' ratios.
func Summarize(r *Results, o Options) Summary {
	o.defaults()
	s := Summary{Scenario: "device", Link: r.Link, Quick: o.Quick, Efficiency: map[string]map[string]float64{}, EfficiencyIP: map[string]map[string]float64{},
		Goodput: map[string]map[string]float64{}, LinkBytes: map[string]map[string]float64{}, CPUEnergy: map[string]map[string]float64{},
		RadioEnergy: map[string]map[string]float64{}, Ratios: map[string]float64{}, Skipped: r.Skipped,
		Paper: map[string]float64{"efficiency_256_ssh": 0.30, "efficiency_256_https": 0.13}}
	put := func(m map[string]map[string]float64, k string, size int, v float64) {
		if m[k] == nil {
			m[k] = map[string]float64{}
		}
		m[k][fmt.Sprint(size)] = v
	}
	plain := map[string]Row{}
	for _, row := range r.Rows {
		if row.Scheme == "plain" && row.Err == "" {
			plain[row.Proto+fmt.Sprint(row.Size)] = row
		}
	}
	for _, row := range r.Rows {
		if row.Err != "" {
			s.Skipped[fmt.Sprintf("%s %s %d B", row.Scheme, row.Proto, row.Size)] = row.Err
			continue
		}
		k := row.Scheme + "_" + row.Proto
		put(s.Efficiency, k, row.Size, row.Efficiency)
		put(s.EfficiencyIP, k, row.Size, row.EfficiencyIP)
		put(s.Goodput, k, row.Size, row.Goodput)
		put(s.LinkBytes, k, row.Size, float64(row.LinkBytes)/float64(row.Requests))
		if p, ok := plain[row.Proto+fmt.Sprint(row.Size)]; ok && p.CPUJ > 0 && p.RadioJoule > 0 {
			// per request, since series lengths may differ
			put(s.CPUEnergy, k, row.Size, (row.CPUJ/float64(row.Requests))/(p.CPUJ/float64(p.Requests)))
			put(s.RadioEnergy, k, row.Size, (row.RadioJoule/float64(row.Requests))/(p.RadioJoule/float64(p.Requests)))
		}
	}
	// Targets: iotsafe at least as efficient as OpenSSH at every size (worst ratio),
	// compressed iotsafe as OpenSSH -C up to 4 KiB, and at 256 B at least 2x HTTPS.
	for _, proto := range o.Protos {
		if w := worstRatio(s.Efficiency["iotsafe_"+proto], s.Efficiency["openssh_"+proto], 0); w > 0 {
			s.Ratios["iotsafe_over_openssh_worst_size_"+proto] = w
		}
		if w := worstRatio(s.Efficiency["iotsafe_c_"+proto], s.Efficiency["openssh_c_"+proto], 4096); w > 0 {
			s.Ratios["iotsafe_c_over_openssh_c_worst_size_to_4k_"+proto] = w
		}
		if a, b := s.Efficiency["iotsafe_"+proto]["256"], s.Efficiency["https12_"+proto]["256"]; a > 0 && b > 0 {
			s.Ratios["iotsafe_over_https12_at_256_"+proto] = a / b
		}
	}
	return s
}

// worstRatio is the smallest a[size]/b[size] over the sizes both have (up to maxSize
// bytes, if not 0); 0 if there are none.
func worstRatio(a, b map[string]float64, maxSize int) float64 {
	worst := 0.0
	for size, v := range a {
		if n, err := strconv.Atoi(size); err != nil || (maxSize > 0 && n > maxSize) {
			continue
		}
		if o := b[size]; o > 0 {
			if r := v / o; worst == 0 || r < worst {
				worst = r
			}
		}
	}
	return worst
}

// Write writes device.csv, environment.json, summary.json and report.html.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "device.csv"), []string{"scheme", "proto", "size", "requests", "seconds", "link_bytes", "frames",
		"ip_bytes", "airtime_tx_s", "airtime_rx_s", "device_cpu_s", "goodput_bps", "efficiency", "efficiency_ip", "cpu_joule", "radio_joule", "error"}, func(w func(...string)) {
		for _, x := range r.Rows {
			w(x.Scheme, x.Proto, fmt.Sprint(x.Size), fmt.Sprint(x.Requests), fmt.Sprintf("%.4f", x.Seconds), fmt.Sprint(x.LinkBytes), fmt.Sprint(x.Frames),
				fmt.Sprint(x.IPBytes), fmt.Sprintf("%.4f", x.AirTX.Seconds()), fmt.Sprintf("%.4f", x.AirRX.Seconds()), fmt.Sprintf("%.4f", x.CPU.Seconds()),
				fmt.Sprintf("%.0f", x.Goodput), fmt.Sprintf("%.4f", x.Efficiency), fmt.Sprintf("%.4f", x.EfficiencyIP), fmt.Sprintf("%.5f", x.CPUJ), fmt.Sprintf("%.5f", x.RadioJoule), x.Err)
		}
	}); err != nil {
		return err
	}
	f, err := lab.WriteRunFiles(dir, env, s)
	if err != nil {
		return err
	}
	defer f.Close()
	charts := []template.HTML{}
	for _, proto := range []string{"h1", "h2"} {
		pick := func(m map[string]map[string]float64) map[string]map[string]float64 {
			out := map[string]map[string]float64{}
			for k, v := range m {
				if len(k) > 3 && k[len(k)-3:] == "_"+proto {
					out[k[:len(k)-3]] = v
				}
			}
			return out
		}
		name := map[string]string{"h1": "HTTP/1.1", "h2": "HTTP/2"}[proto]
		for _, c := range []template.HTML{
			lab.LineChart("Fig. 11: channel efficiency, "+name, "file bytes", "goodput / link throughput", lab.MapSeries(pick(s.Efficiency)), true),
			lab.LineChart("Fig. 12: goodput, "+name, "file bytes", "bit/s", lab.MapSeries(pick(s.Goodput)), true),
			lab.LineChart("Fig. 13: device CPU energy over plain HTTP, "+name, "file bytes", "ratio", lab.MapSeries(pick(s.CPUEnergy)), true),
			lab.LineChart("Fig. 14: radio energy over plain HTTP, "+name, "file bytes", "ratio", lab.MapSeries(pick(s.RadioEnergy)), true),
		} {
			if c != "" {
				charts = append(charts, c)
			}
		}
	}
	return deviceTmpl.Execute(f, struct {
		Env    lab.Environment
		S      Summary
		Charts []template.HTML
	}{env, s, charts})
}

var deviceTmpl = template.Must(template.New("d").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>iotsafe bench device — {{.S.Link}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}.note{color:#555;font-size:.9rem}svg text{font-size:12px}</style></head><body>
<h1>Device benchmark (paper 000, section VI) over the emulated {{.S.Link}} link</h1>
<p class="note">{{.Env.CPU}}, {{.Env.Cores}} cores, Linux {{.Env.Kernel}}, {{.Env.Go}}{{if .Env.Quick}}, <b>quick run</b>: harness check, not a measurement{{end}}.
HTTP GETs of random text files from the device namespace to the gateway's server through the link emulator; h1: a new connection per request (as ab), h2: one connection per series (as h2load).
Efficiency is file bytes over all bytes on the air in both directions (goodput over link throughput).</p>
<table><tr><th>paper 000 vs this machine</th><th>paper</th><th>here</th></tr>
<tr><td>efficiency at 256 B, SSH (iotsafe, HTTP/1.1)</td><td>0.30</td><td>{{printf "%.2f" (index .S.Efficiency "iotsafe_h1" "256")}}</td></tr>
<tr><td>efficiency at 256 B, SSH (OpenSSH, HTTP/1.1)</td><td>0.30</td><td>{{printf "%.2f" (index .S.Efficiency "openssh_h1" "256")}}</td></tr>
<tr><td>efficiency at 256 B, HTTPS (TLS 1.2, HTTP/1.1)</td><td>0.13</td><td>{{printf "%.2f" (index .S.Efficiency "https12_h1" "256")}}</td></tr>
<tr><td>the same counting IP bytes only: iotsafe / OpenSSH / HTTPS</td><td>0.30 / 0.30 / 0.13</td><td>{{printf "%.2f" (index .S.EfficiencyIP "iotsafe_h1" "256")}} / {{printf "%.2f" (index .S.EfficiencyIP "openssh_h1" "256")}} / {{printf "%.2f" (index .S.EfficiencyIP "https12_h1" "256")}}</td></tr></table>
<table><tr><th>ratio (same run)</th><th>value</th></tr>{{range $k, $v := .S.Ratios}}<tr><td>{{$k}}</td><td>{{printf "%.2f" $v}}</td></tr>{{end}}</table>
{{range .Charts}}{{.}}{{end}}
{{if .S.Skipped}}<h2>Skipped</h2><ul>{{range $k, $v := .S.Skipped}}<li>{{$k}}: {{$v}}</li>{{end}}</ul>{{end}}
<p class="note">Raw data: device.csv; summary.json (schema in docs/bench.md); environment.json. Energy: radio = airtime x AT86RF233 currents (TX 13.8 mA, RX 11.8 mA) x 3 V; CPU = device-side CPU time x 0.35 W.</p>
</body></html>
`))

// Print prints efficiency per scheme and size, and the ratios.
func Print(w io.Writer, s Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	keys := lab.SortedKeys(s.Efficiency)
	sizes := map[string]float64{}
	for _, k := range keys {
		for size := range s.Efficiency[k] {
			sizes[size] = 0
		}
	}
	cols := lab.SortedNumKeys(sizes)
	fmt.Fprint(tw, "efficiency\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s B\t", c)
	}
	fmt.Fprintln(tw)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t", k)
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", lab.FmtOpt(s.Efficiency[k], c))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nratios (same run):")
	for _, k := range lab.SortedKeys(s.Ratios) {
		fmt.Fprintf(w, "  %-40s %.2f\n", k, s.Ratios[k])
	}
	for _, k := range lab.SortedKeys(s.Skipped) {
		fmt.Fprintf(w, "skipped %s: %s\n", k, s.Skipped[k])
	}
}
