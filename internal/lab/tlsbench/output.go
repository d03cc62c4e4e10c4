package tlsbench

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Summary is summary.json (schema iotsafe.bench.tls/1, docs/bench.md).
type Summary struct {
	Schema string `json:"schema"`
	Quick  bool   `json:"quick"`
	Reps   int    `json:"reps"`
	// AvgMs is impl -> mode -> K -> median time per connection in ms; BytesPerConn the
	// bytes both ways per connection at the largest K.
	AvgMs        map[string]map[string]map[string]float64 `json:"avg_ms"`
	BytesPerConn map[string]map[string]float64            `json:"bytes_per_connection"`
	// Speedup is impl -> mode -> full handshake time over the mode's, at the largest K.
	Speedup map[string]map[string]float64 `json:"speedup_over_full"`
	Skipped map[string]string             `json:"skipped"`
	// SuitesGroups is impl -> suite -> group -> what one client did in WindowSeconds
	// of full handshakes one after the other (figs. 3, 4).
	SuitesGroups  map[string]map[string]map[string]WindowCell `json:"suites_groups,omitempty"`
	WindowSeconds float64                                     `json:"window_seconds,omitempty"`
	// Primitives is impl -> primitive -> {value, unit} (fig. 2): MB/s on 1 KiB buffers,
	// or ops/s.
	Primitives map[string]map[string]PrimitiveValue `json:"primitives,omitempty"`
	// Best names, for each implementation, the best choice per metric: "fastest_mode"
	// (fig. 5, largest K), "most_connections" and "fewest_bytes" (suite and group, figs.
	// 3, 4), "fewest_frames" (mode, on a link).
	Best map[string]map[string]string `json:"best,omitempty"`
	// Link is the emulated link fig. 5 ran across ("" for loopback); LinkPerConnection
	// is impl -> mode -> what one connection cost on it, at the largest K.
	Link              string                         `json:"link,omitempty"`
	LinkPerConnection map[string]map[string]LinkCell `json:"link_per_connection,omitempty"`
	// Payload is impl -> message size -> fig. 6's figures on one connection.
	Payload map[string]map[string]PayloadCell `json:"payload,omitempty"`
	// TargetMet: with Go's TLS (the hub's), resumption at least twice the connection rate
	// of a full handshake (issue 15; the paper: about 2x).
	TargetMet bool `json:"target_met"`
}

// LinkCell is one connection's cost on the emulated link: frames (retransmissions
// included, acknowledgements not), bytes on the air, airtime, and the device radio's
// energy (sending the client's side, receiving the server's).
type LinkCell struct {
	Frames    float64 `json:"frames"`
	LinkBytes float64 `json:"link_bytes"`
	AirtimeMs float64 `json:"airtime_ms"`
	RadioMJ   float64 `json:"radio_mj"`
}

// PayloadCell is one fig. 6 figure: messages echoed per second, the client's MB/s each
// way (TLS records included), and what TLS added to each message on the wire.
type PayloadCell struct {
	PerSecond     float64 `json:"messages_per_second"`
	TXMBps        float64 `json:"tx_mb_per_second"`
	RXMBps        float64 `json:"rx_mb_per_second"`
	OverheadBytes float64 `json:"overhead_bytes_per_message"`
}

// PrimitiveValue is one fig. 2 figure.
type PrimitiveValue struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// WindowCell is one suites x groups cell.
type WindowCell struct {
	Connections        int     `json:"connections"`
	Bytes              int64   `json:"bytes"` // both ways, the whole window
	PerSecond          float64 `json:"connections_per_second"`
	BytesPerConnection float64 `json:"bytes_per_connection"`
}

// Summarize takes medians and speedups.
func Summarize(r Result) Summary {
	s := Summary{Schema: "iotsafe.bench.tls/1", Quick: r.Options.Quick, Reps: r.Options.Reps, AvgMs: map[string]map[string]map[string]float64{},
		BytesPerConn: map[string]map[string]float64{}, Speedup: map[string]map[string]float64{}, Skipped: r.Skipped}
	kmax := slices.Max(r.Options.K)
	vals := map[[3]string][]float64{}
	for _, run := range r.Runs {
		key := [3]string{run.Impl, run.Mode, fmt.Sprint(run.K)}
		vals[key] = append(vals[key], run.Seconds*1000/float64(run.K))
		if run.K == kmax {
			if s.BytesPerConn[run.Impl] == nil {
				s.BytesPerConn[run.Impl] = map[string]float64{}
			}
			s.BytesPerConn[run.Impl][run.Mode] = float64(run.Sent+run.Received) / float64(run.K)
		}
	}
	for key, v := range vals {
		if s.AvgMs[key[0]] == nil {
			s.AvgMs[key[0]] = map[string]map[string]float64{}
		}
		if s.AvgMs[key[0]][key[1]] == nil {
			s.AvgMs[key[0]][key[1]] = map[string]float64{}
		}
		s.AvgMs[key[0]][key[1]][key[2]] = lab.Median(v)
	}
	k := fmt.Sprint(kmax)
	for impl, modes := range s.AvgMs {
		full := modes["full"][k]
		for mode, byK := range modes {
			if mode == "full" || full == 0 || byK[k] == 0 {
				continue
			}
			if s.Speedup[impl] == nil {
				s.Speedup[impl] = map[string]float64{}
			}
			s.Speedup[impl][mode] = full / byK[k]
		}
	}
	s.TargetMet = s.Speedup["go"]["resume"] >= 2
	s.Link = r.Options.Link.Name
	type acc struct {
		cost lab.LinkCost
		n    int
	}
	perConn := map[[2]string]*acc{}
	for _, run := range r.Runs {
		if run.K != kmax || run.Link.Frames == 0 {
			continue
		}
		k := [2]string{run.Impl, run.Mode}
		if perConn[k] == nil {
			perConn[k] = &acc{}
		}
		a := perConn[k]
		a.cost = a.cost.Plus(run.Link)
		a.n += run.K
	}
	for k, a := range perConn {
		if s.LinkPerConnection == nil {
			s.LinkPerConnection = map[string]map[string]LinkCell{}
		}
		if s.LinkPerConnection[k[0]] == nil {
			s.LinkPerConnection[k[0]] = map[string]LinkCell{}
		}
		n := float64(a.n)
		s.LinkPerConnection[k[0]][k[1]] = LinkCell{Frames: float64(a.cost.Frames) / n, LinkBytes: float64(a.cost.LinkBytes) / n,
			AirtimeMs: float64((a.cost.TX + a.cost.RX).Microseconds()) / 1000 / n,
			RadioMJ:   lab.RadioJoules(a.cost.TX/time.Duration(a.n), a.cost.RX/time.Duration(a.n)) * 1000}
	}
	for _, pl := range r.Payloads {
		if s.Payload == nil {
			s.Payload = map[string]map[string]PayloadCell{}
		}
		if s.Payload[pl.Impl] == nil {
			s.Payload[pl.Impl] = map[string]PayloadCell{}
		}
		if pl.K > 0 && pl.Seconds > 0 {
			s.Payload[pl.Impl][fmt.Sprint(pl.Size)] = PayloadCell{PerSecond: float64(pl.K) / pl.Seconds,
				TXMBps: float64(pl.Sent) / pl.Seconds / 1e6, RXMBps: float64(pl.Received) / pl.Seconds / 1e6,
				OverheadBytes: float64(pl.Sent)/float64(pl.K) - float64(pl.Size)}
		}
	}
	for _, pr := range r.Primitives {
		if s.Primitives == nil {
			s.Primitives = map[string]map[string]PrimitiveValue{}
		}
		if s.Primitives[pr.Impl] == nil {
			s.Primitives[pr.Impl] = map[string]PrimitiveValue{}
		}
		s.Primitives[pr.Impl][pr.Name] = PrimitiveValue{pr.Value, pr.Unit}
	}
	for _, c := range r.Cells {
		if s.SuitesGroups == nil {
			s.SuitesGroups, s.WindowSeconds = map[string]map[string]map[string]WindowCell{}, r.Options.Window.Seconds()
		}
		if s.SuitesGroups[c.Impl] == nil {
			s.SuitesGroups[c.Impl] = map[string]map[string]WindowCell{}
		}
		if s.SuitesGroups[c.Impl][c.Suite] == nil {
			s.SuitesGroups[c.Impl][c.Suite] = map[string]WindowCell{}
		}
		w := WindowCell{Connections: c.K, Bytes: c.Sent + c.Received}
		if c.Seconds > 0 {
			w.PerSecond = float64(c.K) / c.Seconds
		}
		if c.K > 0 {
			w.BytesPerConnection = float64(w.Bytes) / float64(c.K)
		}
		s.SuitesGroups[c.Impl][c.Suite][c.Group] = w
	}
	s.Best = best(s)
	return s
}

// Run measures, writes the files into out and prints the summary on w.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench tls: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && len(res.Runs) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Write writes connections.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, r Result, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "connections.csv"), []string{"impl", "mode", "k", "rep", "seconds", "avg_ms", "resumed", "bytes_sent", "bytes_received"}, func(w func(...string)) {
		for _, run := range r.Runs {
			w(run.Impl, run.Mode, fmt.Sprint(run.K), fmt.Sprint(run.Rep+1), fmt.Sprintf("%.6f", run.Seconds), fmt.Sprintf("%.4f", run.Seconds*1000/float64(run.K)),
				fmt.Sprint(run.Resumed), fmt.Sprint(run.Sent), fmt.Sprint(run.Received))
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "suites_groups.csv"), []string{"impl", "suite", "group", "seconds", "connections", "bytes_sent", "bytes_received"}, func(w func(...string)) {
		for _, c := range r.Cells {
			w(c.Impl, c.Suite, c.Group, fmt.Sprintf("%.3f", c.Seconds), fmt.Sprint(c.K), fmt.Sprint(c.Sent), fmt.Sprint(c.Received))
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "payload.csv"), []string{"impl", "size", "seconds", "messages", "bytes_sent", "bytes_received"}, func(w func(...string)) {
		for _, pl := range r.Payloads {
			w(pl.Impl, fmt.Sprint(pl.Size), fmt.Sprintf("%.3f", pl.Seconds), fmt.Sprint(pl.K), fmt.Sprint(pl.Sent), fmt.Sprint(pl.Received))
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "primitives.csv"), []string{"impl", "primitive", "value", "unit"}, func(w func(...string)) {
		for _, pr := range r.Primitives {
			w(pr.Impl, pr.Name, fmt.Sprintf("%.1f", pr.Value), pr.Unit)
		}
	}); err != nil {
		return err
	}
	f, err := lab.WriteRunFiles(dir, env, s)
	if err != nil {
		return err
	}
	defer f.Close()
	series := map[string]map[string]float64{}
	for impl, modes := range s.AvgMs {
		for mode, byK := range modes {
			series[impl+" "+mode] = byK
		}
	}
	chart := lab.LineChart("Average time per connection over K subsequent connections (fig. 5)", "K", "ms", lab.MapSeries(series), true)
	return reportTmpl.Execute(f, map[string]any{"Title": "iotsafe bench tls", "Env": env, "S": s, "Chart": chart})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	for _, impl := range lab.SortedKeys(s.AvgMs) {
		for _, mode := range lab.SortedKeys(s.AvgMs[impl]) {
			fmt.Fprintf(w, "  %-8s %-11s", impl, mode)
			for _, k := range lab.SortedNumKeys(s.AvgMs[impl][mode]) {
				fmt.Fprintf(w, "  K=%s %.3f ms", k, s.AvgMs[impl][mode][k])
			}
			if x, ok := s.Speedup[impl][mode]; ok {
				fmt.Fprintf(w, "  (%.2fx faster than full)", x)
			}
			fmt.Fprintln(w)
		}
	}
	for _, k := range lab.SortedKeys(s.Skipped) {
		fmt.Fprintf(w, "  %s: not supported: %s\n", k, s.Skipped[k])
	}
	for _, impl := range lab.SortedKeys(s.SuitesGroups) {
		for _, suite := range lab.SortedKeys(s.SuitesGroups[impl]) {
			fmt.Fprintf(w, "  %-8s %-29s", impl, suite)
			for _, group := range lab.SortedKeys(s.SuitesGroups[impl][suite]) {
				c := s.SuitesGroups[impl][suite][group]
				fmt.Fprintf(w, "  %s %d conns %.0f B/conn", group, c.Connections, c.BytesPerConnection)
			}
			fmt.Fprintln(w)
		}
	}
	for _, impl := range lab.SortedKeys(s.LinkPerConnection) {
		for _, mode := range lab.SortedKeys(s.LinkPerConnection[impl]) {
			c := s.LinkPerConnection[impl][mode]
			fmt.Fprintf(w, "  on %s: %-8s %-11s %.1f frames, %.0f bytes on the air, %.1f ms airtime, %.2f mJ per connection\n", s.Link, impl, mode, c.Frames, c.LinkBytes, c.AirtimeMs, c.RadioMJ)
		}
	}
	for _, impl := range lab.SortedKeys(s.Payload) {
		for _, size := range lab.SortedNumKeys(payloadRates(s.Payload[impl])) {
			c := s.Payload[impl][size]
			fmt.Fprintf(w, "  %-8s %6s-byte messages: %.0f/s, %.1f MB/s each way, +%.0f bytes each\n", impl, size, c.PerSecond, c.TXMBps, c.OverheadBytes)
		}
	}
	for _, name := range primitiveNames(s.Primitives) {
		fmt.Fprintf(w, "  %-24s", name)
		for _, impl := range lab.SortedKeys(s.Primitives) {
			if v, ok := s.Primitives[impl][name]; ok {
				fmt.Fprintf(w, "  %s %.0f %s", impl, v.Value, v.Unit)
			}
		}
		fmt.Fprintln(w)
	}
	for _, impl := range lab.SortedKeys(s.Best) {
		fmt.Fprintf(w, "  best for %s:", impl)
		for _, metric := range lab.SortedKeys(s.Best[impl]) {
			fmt.Fprintf(w, " %s %s;", metric, s.Best[impl][metric])
		}
		fmt.Fprintln(w)
	}
	verdict := lab.Verdict(s.TargetMet)
	fmt.Fprintf(w, "target (Go's TLS, the hub's: resumption >= 2x the rate of a full handshake): %s\n", verdict)
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>TLS 1.3: full handshake, resumption and external PSK (paper 003, fig. 5)</h1>
<p class="note">{{template "env" .Env}}.
Client and server of the same implementation on loopback; each connection: TCP connect, TLS 1.3 handshake with the certificate verified as a real client does (TLS_AES_128_GCM_SHA256, X25519, ECDSA P-256 certificate), one byte from the server (which also delivers the session tickets), close. {{.S.Reps}} repetitions, medians.</p>
<p>Target (issue 15): with Go's TLS (the hub's), resumption at least twice the connection rate of a full handshake — <b>{{if .S.TargetMet}}met{{else}}not met{{end}}</b>. The paper: resumption more than 2x faster than a full handshake; PSK faster than a full handshake.</p>
{{.Chart}}
{{if .S.Best}}<h2>Best per metric</h2><table><tr><th>implementation</th><th>metric</th><th>best</th></tr>
{{range $impl, $m := .S.Best}}{{range $metric, $choice := $m}}<tr><td>{{$impl}}</td><td>{{$metric}}</td><td>{{$choice}}</td></tr>{{end}}{{end}}</table>{{end}}
<table><tr><th>implementation</th><th>mode</th><th>faster than a full handshake (largest K)</th><th>bytes per connection</th></tr>
{{range $impl, $modes := .S.Speedup}}{{range $mode, $x := $modes}}<tr><td>{{$impl}}</td><td>{{$mode}}</td><td>{{f "%.2fx" $x}}</td><td>{{f "%.0f" (index (index $.S.BytesPerConn $impl) $mode)}}</td></tr>{{end}}{{end}}
</table>
{{if .S.SuitesGroups}}<h2>TLS 1.3 suites x groups in a {{f "%.1f" .S.WindowSeconds}} s window (figs. 3, 4)</h2>
<p class="note">One client, full handshakes one after the other for the window (the paper: 15 s), each verified; connections made and bytes both ways per connection.</p>
<table><tr><th>implementation</th><th>suite</th><th>group</th><th>connections</th><th>per second</th><th>bytes per connection</th><th>bytes in the window</th></tr>
{{range $impl, $suites := .S.SuitesGroups}}{{range $suite, $groups := $suites}}{{range $group, $c := $groups}}<tr><td>{{$impl}}</td><td>{{$suite}}</td><td>{{$group}}</td><td>{{$c.Connections}}</td><td>{{f "%.0f" $c.PerSecond}}</td><td>{{f "%.0f" $c.BytesPerConnection}}</td><td>{{$c.Bytes}}</td></tr>{{end}}{{end}}{{end}}</table>{{end}}
{{if .S.LinkPerConnection}}<h2>One connection on the emulated {{.S.Link}} link</h2>
<p class="note">Fig. 5 ran across the lab's emulated link (client in the device's namespace, server in the gateway's): what one connection of each mode cost there, counted on the link at the largest K — frames (retransmissions included), bytes on the air, airtime, the device radio's energy (docs/bench.md).</p>
<table><tr><th>implementation</th><th>mode</th><th>frames</th><th>bytes on the air</th><th>airtime ms</th><th>radio mJ</th></tr>
{{range $impl, $modes := .S.LinkPerConnection}}{{range $mode, $c := $modes}}<tr><td>{{$impl}}</td><td>{{$mode}}</td><td>{{f "%.1f" $c.Frames}}</td><td>{{f "%.0f" $c.LinkBytes}}</td><td>{{f "%.1f" $c.AirtimeMs}}</td><td>{{f "%.2f" $c.RadioMJ}}</td></tr>{{end}}{{end}}</table>{{end}}
{{if .S.Payload}}<h2>Throughput against payload (fig. 6)</h2>
<p class="note">One TLS 1.3 connection to the implementation's own echo server; the client sends a message of each size and reads it back, one after the other, for the window; MB/s on the client's socket each way, TLS records included. Go's ends are goroutines of one process, the helpers' two processes (their round trips include the kernel waking the other): compare MB/s at large messages.</p>
<table><tr><th>implementation</th><th>message bytes</th><th>messages/s</th><th>TX MB/s</th><th>RX MB/s</th><th>TLS bytes added per message</th></tr>
{{range $impl, $sizes := .S.Payload}}{{range $size, $c := $sizes}}<tr><td>{{$impl}}</td><td>{{$size}}</td><td>{{f "%.0f" $c.PerSecond}}</td><td>{{f "%.1f" $c.TXMBps}}</td><td>{{f "%.1f" $c.RXMBps}}</td><td>{{f "%.0f" $c.OverheadBytes}}</td></tr>{{end}}{{end}}</table>{{end}}
{{if .S.Primitives}}<h2>Crypto primitives (fig. 2)</h2>
<p class="note">Symmetric primitives in MB/s on 1 KiB buffers (AEAD seal, SHA-256), key exchanges as one side's shared-secret computations per second (ML-KEM: encapsulations and decapsulations), signatures on a SHA-256 digest per second. Go in process; OpenSSL with <code>openssl speed -mr -bytes 1024</code>; wolfCrypt through the wolfSSL helper's own loop over the same calls.</p>
<table><tr><th>primitive</th>{{range $impl, $_ := .S.Primitives}}<th>{{$impl}}</th>{{end}}</tr>
{{range $name := primitiveNames .S.Primitives}}<tr><td>{{$name}}</td>{{range $impl, $m := $.S.Primitives}}<td>{{with index $m $name}}{{f "%.0f" .Value}} {{.Unit}}{{end}}</td>{{end}}</tr>{{end}}</table>{{end}}
{{if .S.Skipped}}<h2>Not supported</h2><table>{{range $k, $why := .S.Skipped}}<tr><td>{{$k}}</td><td>{{$why}}</td></tr>{{end}}</table>{{end}}
<p class="note">Raw data: connections.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`, template.FuncMap{"primitiveNames": primitiveNames})

// primitiveNames are every primitive measured, sorted.
func primitiveNames(m map[string]map[string]PrimitiveValue) []string {
	seen := map[string]bool{}
	for _, byName := range m {
		for n := range byName {
			seen[n] = true
		}
	}
	return lab.SortedKeys(seen)
}

// payloadRates keys a payload table for sorting by size.
func payloadRates(m map[string]PayloadCell) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v.PerSecond
	}
	return out
}

// best picks each implementation's best mode, suite and group per metric.
func best(s Summary) map[string]map[string]string {
	out := map[string]map[string]string{}
	set := func(impl, metric, choice string) {
		if out[impl] == nil {
			out[impl] = map[string]string{}
		}
		out[impl][metric] = choice
	}
	for impl, modes := range s.AvgMs {
		bestMode, bestMs := "", 0.0
		for mode, byK := range modes {
			keys := lab.SortedNumKeys(byK)
			if len(keys) == 0 {
				continue
			}
			if ms := byK[keys[len(keys)-1]]; bestMode == "" || ms < bestMs {
				bestMode, bestMs = mode, ms
			}
		}
		if bestMode != "" {
			set(impl, "fastest_mode", bestMode)
		}
	}
	for impl, suites := range s.SuitesGroups {
		var most, fewest string
		var mostN int
		var fewestB float64
		for suite, groups := range suites {
			for group, c := range groups {
				name := suite + " " + group
				if most == "" || c.Connections > mostN || c.Connections == mostN && name < most {
					most, mostN = name, c.Connections
				}
				if fewest == "" || c.BytesPerConnection < fewestB || c.BytesPerConnection == fewestB && name < fewest {
					fewest, fewestB = name, c.BytesPerConnection
				}
			}
		}
		set(impl, "most_connections", most)
		set(impl, "fewest_bytes", fewest)
	}
	for impl, modes := range s.LinkPerConnection {
		bestMode, bestF := "", 0.0
		for mode, c := range modes {
			if bestMode == "" || c.Frames < bestF {
				bestMode, bestF = mode, c.Frames
			}
		}
		set(impl, "fewest_frames", bestMode)
	}
	return out
}
