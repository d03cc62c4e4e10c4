package wssecbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// Sizes of one variant and case, in bytes (per message).
type Sizes struct {
	EnvelopeTX int     `json:"envelope_tx"`
	EnvelopeRX int     `json:"envelope_rx"`
	BodyTX     int     `json:"body_tx,omitempty"`
	BodyRX     int     `json:"body_rx,omitempty"`
	WireTX     float64 `json:"wire_tx"`
	WireRX     float64 `json:"wire_rx"`
}

// Air is one exchange (request and answer) over the 802.15.4 model, without losses.
type Air struct {
	Frames    int     `json:"frames"`
	LinkBytes int     `json:"link_bytes"`
	AirtimeMs float64 `json:"airtime_ms"`
	RadioMJ   float64 `json:"radio_mj"` // the device's radio: sending the request, receiving the answer
}

// DeflateCell is one cell of table VI.
type DeflateCell struct {
	Variant      string  `json:"variant"`
	Level        int     `json:"level"`
	Chunk        int     `json:"chunk"`
	RTTMs        float64 `json:"rtt_ms"`
	RequestBytes float64 `json:"request_bytes"`
	Ratio        float64 `json:"ratio_to_level0"`
}

// Summary is summary.json (schema iotsafe.bench.wssec/1, docs/bench.md).
type Summary struct {
	Schema   string `json:"schema"`
	Quick    bool   `json:"quick"`
	Requests int    `json:"requests"`
	// Link is the emulated link the exchanges crossed ("" for loopback). AirMeasured:
	// air_802154 was counted on that link; otherwise it is the 802.15.4 model's cost of
	// the bytes measured on loopback.
	Link        string `json:"link,omitempty"`
	AirMeasured bool   `json:"air_measured"`
	// Variant -> case ("1", "2", "3") -> figures.
	Sizes   map[string]map[string]Sizes   `json:"sizes"`
	RTTMs   map[string]map[string]float64 `json:"rtt_median_ms"`
	Air     map[string]map[string]Air     `json:"air_802154"`
	Deflate []DeflateCell                 `json:"deflate,omitempty"`
	// The targets' ratios by case: WS-SecRec (AES-128-GCM) over TLS 1.3 in round-trip
	// time and in bytes on the wire; WS-CSec over WS-SecRec in round-trip time.
	SecRecOverTLS13RTT  map[string]float64 `json:"secrec_over_tls13_rtt"`
	SecRecOverTLS13Size map[string]float64 `json:"secrec_over_tls13_size"`
	CSecOverSecRecRTT   map[string]float64 `json:"csec_over_secrec_rtt"`
	Targets             map[string]bool    `json:"targets_met"`
	NotReproducible     map[string]string  `json:"not_reproducible"`
}

const (
	tls13  = "tls1.3-aes128-gcm"
	secrec = "secrec-aes128-gcm"
	csec   = "csec-aes128-gcm"
)

// Summarize takes medians, ratios and the link model's costs.
func Summarize(r Result) Summary {
	s := Summary{Schema: "iotsafe.bench.wssec/1", Quick: r.Options.Quick, Requests: r.Options.Requests, Link: r.Options.Link.Name,
		AirMeasured: r.Options.Link.Is802154,
		Sizes:       map[string]map[string]Sizes{}, RTTMs: map[string]map[string]float64{}, Air: map[string]map[string]Air{},
		SecRecOverTLS13RTT: map[string]float64{}, SecRecOverTLS13Size: map[string]float64{}, CSecOverSecRecRTT: map[string]float64{},
		Targets: map[string]bool{},
		NotReproducible: map[string]string{
			"tls_compression": "TLS record compression (the paper's TLS rows, 40-50% smaller) is gone: TLS 1.3 has none, and OpenSSL 3.0 and Go do not offer it (CRIME); the TLS rows here are uncompressed",
			"tls_rc4":         "RC4 in TLS (the paper's TLS RC4 rows) is prohibited (RFC 7465) and absent from Go and OpenSSL 3.0; RC4 remains only as a WS-Security lab row",
		}}
	for _, row := range r.Rows {
		c := strconv.Itoa(row.Case)
		put(s.Sizes, row.Variant, c, Sizes{EnvelopeTX: row.EnvelopeTX, EnvelopeRX: row.EnvelopeRX, BodyTX: row.BodyTX, BodyRX: row.BodyRX, WireTX: row.WireTX, WireRX: row.WireRX})
		put(s.RTTMs, row.Variant, c, lab.Median(row.RTTs))
		if s.AirMeasured && len(row.RTTs) > 0 {
			n := int64(len(row.RTTs))
			put(s.Air, row.Variant, c, Air{Frames: int(row.Link.Frames / n), LinkBytes: int(row.Link.LinkBytes / n),
				AirtimeMs: float64((row.Link.TX + row.Link.RX).Microseconds()) / 1000 / float64(n),
				RadioMJ:   lab.RadioJoules(row.Link.TX/time.Duration(n), row.Link.RX/time.Duration(n)) * 1000})
		} else {
			put(s.Air, row.Variant, c, airCost(row.WireTX, row.WireRX))
		}
	}
	rttOK, sizeOK, csecOK := true, true, true
	for _, row := range r.Rows {
		c := strconv.Itoa(row.Case)
		if row.Variant != secrec {
			continue
		}
		if t, ok := s.RTTMs[tls13][c]; ok && t > 0 {
			s.SecRecOverTLS13RTT[c] = s.RTTMs[secrec][c] / t
			s.SecRecOverTLS13Size[c] = s.Sizes[secrec][c].WireTX / s.Sizes[tls13][c].WireTX
			rttOK = rttOK && s.SecRecOverTLS13RTT[c] <= 1.2
			sizeOK = sizeOK && s.SecRecOverTLS13Size[c] <= 2
		}
		if cs, ok := s.RTTMs[csec][c]; ok {
			s.CSecOverSecRecRTT[c] = cs / s.RTTMs[secrec][c]
			csecOK = csecOK && s.CSecOverSecRecRTT[c] <= 1.5
		}
	}
	if len(s.SecRecOverTLS13RTT) > 0 {
		s.Targets["secrec_rtt_within_1.2x_tls13"] = rttOK
		s.Targets["secrec_size_within_2x_tls13"] = sizeOK
	}
	if len(s.CSecOverSecRecRTT) > 0 {
		s.Targets["csec_rtt_within_1.5x_secrec"] = csecOK
	}
	base := map[string]float64{}
	for _, d := range r.Deflate {
		if d.Level == 0 {
			base[d.Variant+strconv.Itoa(d.Chunk)] = d.RequestBytes
		}
	}
	for _, d := range r.Deflate {
		cell := DeflateCell{Variant: d.Variant, Level: d.Level, Chunk: d.Chunk, RTTMs: lab.Median(d.RTTs), RequestBytes: d.RequestBytes}
		if b := base[d.Variant+strconv.Itoa(d.Chunk)]; b > 0 {
			cell.Ratio = d.RequestBytes / b
		}
		s.Deflate = append(s.Deflate, cell)
	}
	return s
}

func put[V any](m map[string]map[string]V, a, b string, v V) {
	if m[a] == nil {
		m[a] = map[string]V{}
	}
	m[a][b] = v
}

// tcpMSS is the largest TCP payload of one IPv6 packet on the 802.15.4 link (MTU 1280,
// 60 bytes of IPv6 and TCP headers).
const tcpMSS = 1280 - 60

// airCost is one request of tx and one answer of rx TCP payload bytes on the 802.15.4
// model: each split into segments of at most tcpMSS, each segment an IPv6 packet in
// 6LoWPAN frames, mean backoffs, no losses.
func airCost(tx, rx float64) Air {
	p := linkemu.Profiles["802154"]
	var a Air
	var airTX, airRX time.Duration
	for dir, n := range []int{int(tx + 0.5), int(rx + 0.5)} {
		for n > 0 {
			seg := min(n, tcpMSS)
			n -= seg
			c := p.Send(seg+60, nil)
			a.Frames += c.Frames
			a.LinkBytes += c.LinkBytes
			if dir == 0 {
				airTX += c.Airtime
			} else {
				airRX += c.Airtime
			}
		}
	}
	a.AirtimeMs = float64((airTX + airRX).Microseconds()) / 1000
	a.RadioMJ = lab.RadioJoules(airTX, airRX) * 1000
	return a
}

// Run measures, writes the files into out and prints the summary on w.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench wssec: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && len(res.Rows) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Write writes rtt.csv, sizes.csv, deflate.csv, summary.json, environment.json and
// report.html.
func Write(dir string, env lab.Environment, r Result, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "rtt.csv"), []string{"variant", "case", "n", "rtt_ms"}, func(w func(...string)) {
		for _, row := range r.Rows {
			for i, v := range row.RTTs {
				w(row.Variant, strconv.Itoa(row.Case), strconv.Itoa(i+1), fmt.Sprintf("%.3f", v))
			}
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "sizes.csv"), []string{"variant", "case", "envelope_tx", "envelope_rx", "body_tx", "body_rx", "wire_tx", "wire_rx", "frames_802154", "link_bytes_802154", "radio_mj"}, func(w func(...string)) {
		for _, row := range r.Rows {
			a := s.Air[row.Variant][strconv.Itoa(row.Case)]
			w(row.Variant, strconv.Itoa(row.Case), strconv.Itoa(row.EnvelopeTX), strconv.Itoa(row.EnvelopeRX), strconv.Itoa(row.BodyTX), strconv.Itoa(row.BodyRX),
				fmt.Sprintf("%.0f", row.WireTX), fmt.Sprintf("%.0f", row.WireRX), strconv.Itoa(a.Frames), strconv.Itoa(a.LinkBytes), fmt.Sprintf("%.3f", a.RadioMJ))
		}
	}); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "deflate.csv"), []string{"variant", "level", "chunk", "rtt_median_ms", "request_bytes", "ratio_to_level0"}, func(w func(...string)) {
		for _, d := range s.Deflate {
			w(d.Variant, strconv.Itoa(d.Level), strconv.Itoa(d.Chunk), fmt.Sprintf("%.3f", d.RTTMs), fmt.Sprintf("%.0f", d.RequestBytes), fmt.Sprintf("%.3f", d.Ratio))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench wssec", "S": s, "Paper": paper, "Cases": []string{"1", "2", "3"}})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "  %-24s %-6s %10s %10s %10s %8s %10s\n", "variant", "case", "rtt ms", "wire tx", "envelope", "frames", "radio mJ")
	for _, v := range lab.SortedKeys(s.RTTMs) {
		for _, c := range lab.SortedNumKeys(s.RTTMs[v]) {
			sz, a := s.Sizes[v][c], s.Air[v][c]
			fmt.Fprintf(w, "  %-24s %-6s %10.3f %10.0f %10d %8d %10.3f\n", v, c, s.RTTMs[v][c], sz.WireTX, sz.EnvelopeTX, a.Frames, a.RadioMJ)
		}
	}
	for _, c := range lab.SortedNumKeys(s.SecRecOverTLS13RTT) {
		fmt.Fprintf(w, "  case %s: WS-SecRec/TLS 1.3 round trip %.2fx, size %.2fx; WS-CSec/WS-SecRec round trip %.2fx\n",
			c, s.SecRecOverTLS13RTT[c], s.SecRecOverTLS13Size[c], s.CSecOverSecRecRTT[c])
	}
	for _, k := range lab.SortedKeys(s.Targets) {
		fmt.Fprintf(w, "target %s: %s\n", k, lab.Verdict(s.Targets[k]))
	}
	for _, k := range lab.SortedKeys(s.NotReproducible) {
		fmt.Fprintf(w, "not reproducible: %s\n", s.NotReproducible[k])
	}
}
