package wssecbench

import (
	"html/template"

	"github.com/iotsafe/iotsafe/internal/lab"
)

var reportFuncs = template.FuncMap{
	"paper": func(v string) *paperRow {
		if p, ok := paper[v]; ok {
			return &p
		}
		return nil
	},
	"table1": func(c string) [4]int { return paperTable1[c] },
	"table6": func(level int) [2]float64 { return paperTable6[level] },
	"idx":    func(c string) int { return int(c[0] - '1') },
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>SOAP with compact WS-Security against TLS (paper 001)</h1>
<p class="note">{{template "env" .Env}}.
One kept-alive connection per variant {{if .S.Link}}over the emulated {{.S.Link}} link (client in the device's namespace, server in the gateway's){{else}}on loopback{{end}}; the first exchange (connection and TLS session set-up, the paper's dummy request) is not measured; {{.S.Requests}} round trips per variant and case, one per variant in turn; medians. A round trip covers sealing the request, the exchange and opening the answer; the server opens the request and seals its answer in the same form (no storage: the hub's endpoint adds its telemetry store). TLS rows carry the unsecured envelope over Go's TLS (the hub's). Keys are pre-shared, as in the paper.</p>
<h2>Targets (issue 16)</h2>
<table><tr><th>target</th><th>result</th></tr>{{range $k, $v := .S.Targets}}<tr><td>{{$k}}</td><td>{{if $v}}met{{else}}not met{{end}}</td></tr>{{end}}</table>
<table><tr><th>case</th><th>WS-SecRec / TLS 1.3 round trip</th><th>WS-SecRec / TLS 1.3 bytes on the wire</th><th>WS-CSec / WS-SecRec round trip</th></tr>
{{range $c, $x := .S.SecRecOverTLS13RTT}}<tr><td>{{$c}}</td><td>{{f "%.2fx" $x}}</td><td>{{f "%.2fx" (index $.S.SecRecOverTLS13Size $c)}}</td><td>{{f "%.2fx" (index $.S.CSecOverSecRecRTT $c)}}</td></tr>{{end}}</table>
<p class="note">The paper: WS-SecRec 1.18-1.45x TLS's round trip for small payloads, its messages 2-3x TLS records (compressed); WS-CSec 1.3-1.4x WS-SecRec.</p>
<h2>Table I: the unsecured messages</h2>
<table><tr><th>case</th><th>Body tx</th><th>Body rx</th><th>Envelope tx</th><th>Envelope rx</th><th>paper (Body tx/rx, Envelope tx/rx)</th></tr>
{{range $c := .Cases}}{{with index $.S.Sizes "soap"}}{{with index . $c}}<tr><td>{{$c}}</td><td>{{.BodyTX}}</td><td>{{.BodyRX}}</td><td>{{.EnvelopeTX}}</td><td>{{.EnvelopeRX}}</td><td>{{table1 $c}}</td></tr>{{end}}{{end}}{{end}}</table>
<h2>Tables II-V: sizes and round trips</h2>
<table><tr><th>variant</th><th>case</th><th>round trip (median ms)</th><th>envelope tx / rx</th><th>on the wire tx / rx (HTTP, TLS records)</th><th>802.15.4 frames</th><th>bytes on the air</th><th>radio mJ</th><th>paper row</th><th>paper tx bytes</th><th>paper ms</th></tr>
{{range $v, $byCase := .S.RTTMs}}{{range $c, $ms := $byCase}}{{$sz := index (index $.S.Sizes $v) $c}}{{$a := index (index $.S.Air $v) $c}}<tr><td>{{$v}}</td><td>{{$c}}</td><td>{{f "%.3f" $ms}}</td><td>{{$sz.EnvelopeTX}} / {{$sz.EnvelopeRX}}</td><td>{{f "%.0f" $sz.WireTX}} / {{f "%.0f" $sz.WireRX}}</td><td>{{$a.Frames}}</td><td>{{$a.LinkBytes}}</td><td>{{f "%.3f" $a.RadioMJ}}</td>{{with $p := paper $v}}<td>{{$p.Label}}</td><td>{{index $p.TX (idx $c)}}</td><td>{{index $p.RTT (idx $c)}}</td>{{else}}<td></td><td></td><td></td>{{end}}</tr>{{end}}{{end}}</table>
<p class="note">{{if .S.AirMeasured}}802.15.4: counted on the emulated link the exchanges crossed ({{.S.Link}}), per request and its answer, TCP acknowledgements included{{else}}802.15.4: one request and its answer on the lab's link model (250 kbit/s, 6LoWPAN fragmentation, CSMA/CA with mean backoffs, acknowledged frames, no losses), from the bytes measured {{if .S.Link}}on {{.S.Link}}{{else}}on loopback{{end}}{{end}}; the radio is the device's (sending the request, receiving the answer; docs/bench.md).</p>
{{if .S.Deflate}}<h2>Table VI: deflate on the HTTP body (case 2)</h2>
<table><tr><th>variant</th><th>level</th><th>chunk</th><th>round trip (median ms)</th><th>request bytes</th><th>ratio to level 0</th><th>paper (RC4, chunk 1024): bytes, ms</th></tr>
{{range .S.Deflate}}<tr><td>{{.Variant}}</td><td>{{.Level}}</td><td>{{.Chunk}}</td><td>{{f "%.3f" .RTTMs}}</td><td>{{f "%.0f" .RequestBytes}}</td><td>{{f "%.2f" .Ratio}}</td><td>{{table6 .Level}}</td></tr>{{end}}</table>
<p class="note">Go's compress/flate has no buffer-size setting: the chunk is the input the compressor takes before it must emit (a flush). Messages of this size fit one chunk, as the paper's identical columns show.</p>{{end}}
<h2>Not reproducible</h2><table>{{range $k, $why := .S.NotReproducible}}<tr><td>{{$k}}</td><td>{{$why}}</td></tr>{{end}}</table>
<p class="note">Raw data: rtt.csv, sizes.csv, deflate.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`, reportFuncs)
