package mqttmatrix

import (
	"fmt"
	"math"
	"slices"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Summary is summary.json (schema iotsafe.bench.mqtt-matrix/1, docs/bench.md).
type Summary struct {
	Schema   string `json:"schema"`
	Quick    bool   `json:"quick"`
	Clients  int    `json:"clients"`
	Messages int    `json:"messages"`
	Payload  int    `json:"payload_bytes"`
	Reps     int    `json:"reps"`
	// MosquittoNoDelay: Mosquitto ran with Nagle's algorithm off (--mosquitto-nodelay).
	MosquittoNoDelay bool          `json:"mosquitto_nodelay"`
	Cells            []CellSummary `json:"cells"`
	Skips            []Skip        `json:"skipped"`
	Table2           []Table2Row   `json:"table2"`
	Paper            []Table2Row   `json:"paper_table2"`
	Targets          []Target      `json:"targets"`
	// TargetMet: the hub's broker at or above Mosquitto's total bandwidth at every
	// common cell of every link (issue 14).
	TargetMet bool `json:"target_met"`
}

// CellSummary is a cell's medians over its repetitions.
type CellSummary struct {
	Cell
	Negotiated      string     `json:"negotiated,omitempty"`
	Runs            int        `json:"runs"`
	Ratio           float64    `json:"ratio"`
	TotalBandwidth  float64    `json:"total_bandwidth_msgs_per_sec"`
	AvgBandwidth    float64    `json:"avg_bandwidth_msgs_per_sec"`
	TotalRunTime    float64    `json:"total_run_time_s"`
	AvgRunTime      float64    `json:"avg_run_time_s"`
	MsgTimeMin      float64    `json:"msg_time_min_ms"`
	MsgTimeMax      float64    `json:"msg_time_max_ms"`
	MsgTimeMeanAvg  float64    `json:"msg_time_mean_avg_ms"`
	MsgTimeMeanStd  float64    `json:"msg_time_mean_std_ms"`
	ConnectMs       float64    `json:"connect_mean_ms"`
	Percentiles     [5]float64 `json:"msg_time_percentiles_ms"`
	Errors          []string   `json:"errors,omitempty"`
	BandwidthPerRep []float64  `json:"total_bandwidth_per_rep"`
}

// Table2Row is paper 002's table 2 shape: the best and worst suite by total bandwidth
// at QoS 0 for a medium, MQTT version and TLS version (ours: per broker too).
type Table2Row struct {
	Link   string  `json:"link"`
	Broker string  `json:"broker,omitempty"`
	MQTT   string  `json:"mqtt"`
	TLS    string  `json:"tls"`
	Best   string  `json:"best"`
	BestV  float64 `json:"best_msgs_per_sec"`
	Worst  string  `json:"worst"`
	WorstV float64 `json:"worst_msgs_per_sec"`
}

// PaperTable2 is paper 002's table 2 (msg/s at QoS 0; Raspberry Pi 4 brokers behind an
// OpenWrt router, mqtt-benchmark 10 x 100). The paper lists TLS 1.2 suite names in its
// TLS 1.3 rows as printed.
var PaperTable2 = []Table2Row{
	{Link: "ethernet", MQTT: "3.1.1", TLS: "1.2", Best: "ECDHE-RSA-CHACHA20-POLY1305", BestV: 21295, Worst: "ECDHE-ECDSA-AES256-SHA", WorstV: 17353},
	{Link: "wifi", MQTT: "3.1.1", TLS: "1.2", Best: "AES256-GCM-SHA384", BestV: 22623, Worst: "DHE-RSA-CHACHA20-POLY1305", WorstV: 10527},
	{Link: "wifi", MQTT: "3.1.1", TLS: "1.3", Best: "ECDHE-ECDSA-AES256-GCM-SHA384", BestV: 22525, Worst: "DHE-RSA-AES256-GCM-SHA384", WorstV: 21553},
	{Link: "wifi", MQTT: "5", TLS: "1.2", Best: "AES128-GCM-SHA256", BestV: 20661, Worst: "ECDHE-RSA-CHACHA20-POLY1305", WorstV: 10597},
	{Link: "wifi", MQTT: "5", TLS: "1.3", Best: "ECDHE-RSA-AES256-GCM-SHA384", BestV: 21553, Worst: "DHE-RSA-AES256-GCM-SHA384", WorstV: 20242},
	{Link: "lte", MQTT: "3.1.1", TLS: "1.2", Best: "DHE-RSA-CHACHA20-POLY1305", BestV: 22239, Worst: "ECDHE-RSA-AES128-GCM-SHA256", WorstV: 12819},
	{Link: "lte", MQTT: "5", TLS: "1.2", Best: "AES128-SHA", BestV: 22526, Worst: "ECDHE-ECDSA-AES128-SHA", WorstV: 13743},
	{Link: "lte", MQTT: "3.1.1", TLS: "1.3", Best: "ECDHE-ECDSA-AES256-GCM-SHA384", BestV: 22333, Worst: "TLS_AES_128_GCM_SHA256", WorstV: 5376},
	{Link: "lte", MQTT: "5", TLS: "1.3", Best: "TLS_CHACHA20_POLY1305_SHA256", BestV: 21461, Worst: "ECDHE-RSA-AES256-GCM-SHA384", WorstV: 21113},
}

// Target is the hub against Mosquitto on one link, over the cells both ran.
type Target struct {
	Link string `json:"link"`
	// Cells both brokers ran; Below of them where the hub had less total bandwidth.
	Cells        int     `json:"cells"`
	Below        int     `json:"below"`
	MinRatio     float64 `json:"min_ratio"` // hub / Mosquitto, total bandwidth
	GeoMeanRatio float64 `json:"geomean_ratio"`
	Worst        string  `json:"worst_cell"`
	// SSHOverPlain: the SSH path's total bandwidth over plain MQTT's (geometric mean of
	// the common QoS x MQTT cells), when both ran.
	SSHOverPlain float64 `json:"ssh_over_plain,omitempty"`
	Met          bool    `json:"met"`
}

// Summarize computes the medians, table 2 and the targets.
func Summarize(r Result) Summary {
	o := r.Options
	s := Summary{Schema: "iotsafe.bench.mqtt-matrix/1", Quick: o.Quick, Clients: o.Clients, Messages: o.Messages, Payload: o.Payload, Reps: o.Reps, MosquittoNoDelay: o.MosquittoNoDelay, Skips: r.Skips, Paper: PaperTable2}
	byCell := map[Cell][]Run{}
	var order []Cell
	for _, run := range r.Runs {
		if _, ok := byCell[run.Cell]; !ok {
			order = append(order, run.Cell)
		}
		byCell[run.Cell] = append(byCell[run.Cell], run)
	}
	med := func(runs []Run, f func(Run) float64) float64 {
		var v []float64
		for _, r := range runs {
			v = append(v, f(r))
		}
		return lab.Median(v)
	}
	cells := map[Cell]CellSummary{}
	for _, c := range order {
		runs := byCell[c]
		cs := CellSummary{Cell: c, Negotiated: runs[0].Negotiated, Runs: len(runs)}
		cs.Ratio = med(runs, func(r Run) float64 { return r.Totals.Ratio })
		cs.TotalBandwidth = med(runs, func(r Run) float64 { return r.Totals.TotalMsgsPerSec })
		cs.AvgBandwidth = med(runs, func(r Run) float64 { return r.Totals.AvgMsgsPerSec })
		cs.TotalRunTime = med(runs, func(r Run) float64 { return r.Totals.TotalRunTime })
		cs.AvgRunTime = med(runs, func(r Run) float64 { return r.Totals.AvgRunTime })
		cs.MsgTimeMin = med(runs, func(r Run) float64 { return r.Totals.MsgTimeMin })
		cs.MsgTimeMax = med(runs, func(r Run) float64 { return r.Totals.MsgTimeMax })
		cs.MsgTimeMeanAvg = med(runs, func(r Run) float64 { return r.Totals.MsgTimeMeanAvg })
		cs.MsgTimeMeanStd = med(runs, func(r Run) float64 { return r.Totals.MsgTimeMeanStd })
		cs.ConnectMs = med(runs, func(r Run) float64 { return r.Totals.ConnectMeanMs })
		for k := range cs.Percentiles {
			cs.Percentiles[k] = med(runs, func(r Run) float64 { return r.Totals.P[k] })
		}
		for _, r := range runs {
			cs.BandwidthPerRep = append(cs.BandwidthPerRep, r.Totals.TotalMsgsPerSec)
			for e := range r.Errors {
				if !slices.Contains(cs.Errors, e) {
					cs.Errors = append(cs.Errors, e)
				}
			}
		}
		cells[c] = cs
		s.Cells = append(s.Cells, cs)
	}
	s.Table2 = table2(s.Cells)
	s.TargetMet = true
	for _, link := range o.Links {
		t := Target{Link: link, MinRatio: math.Inf(1)}
		logSum := 0.0
		var sshLog float64
		sshN := 0
		for _, c := range order {
			if c.Link != link {
				continue
			}
			switch c.Broker {
			case Hub:
				m := c
				m.Broker = Mosquitto
				mos, ok := cells[m]
				if !ok || mos.TotalBandwidth <= 0 {
					continue
				}
				ratio := cells[c].TotalBandwidth / mos.TotalBandwidth
				t.Cells++
				logSum += math.Log(max(ratio, 1e-9))
				if ratio < 1 {
					t.Below++
				}
				if ratio < t.MinRatio {
					t.MinRatio, t.Worst = ratio, c.String()
				}
			case SSH:
				p := c
				p.Broker = Plain
				if pl, ok := cells[p]; ok && pl.TotalBandwidth > 0 {
					sshLog += math.Log(max(cells[c].TotalBandwidth/pl.TotalBandwidth, 1e-9))
					sshN++
				}
			}
		}
		if t.Cells == 0 {
			t.MinRatio = 0
		} else {
			t.GeoMeanRatio = math.Exp(logSum / float64(t.Cells))
		}
		if sshN > 0 {
			t.SSHOverPlain = math.Exp(sshLog / float64(sshN))
		}
		t.Met = t.Cells > 0 && t.Below == 0
		s.TargetMet = s.TargetMet && t.Met
		s.Targets = append(s.Targets, t)
	}
	return s
}

// table2 is our table 2: for each link, broker, MQTT and TLS version, the best and
// worst suite by total bandwidth at QoS 0.
func table2(cells []CellSummary) []Table2Row {
	type key struct{ link, broker, mqtt, tls string }
	rows := map[key]*Table2Row{}
	var order []key
	for _, c := range cells {
		if c.QoS != 0 || c.TLS == "" || c.Runs == 0 {
			continue
		}
		k := key{c.Link, c.Broker, c.MQTT, c.TLS}
		r := rows[k]
		if r == nil {
			r = &Table2Row{Link: c.Link, Broker: c.Broker, MQTT: c.MQTT, TLS: c.TLS, WorstV: math.Inf(1)}
			rows[k] = r
			order = append(order, k)
		}
		if c.TotalBandwidth > r.BestV {
			r.Best, r.BestV = c.Suite, c.TotalBandwidth
		}
		if c.TotalBandwidth < r.WorstV {
			r.Worst, r.WorstV = c.Suite, c.TotalBandwidth
		}
	}
	var out []Table2Row
	for _, k := range order {
		out = append(out, *rows[k])
	}
	return out
}

// fmtCell is a cell's bandwidth for tables ("" when it did not run).
func fmtCell(cs CellSummary, ok bool) string {
	if !ok {
		return ""
	}
	return fmt.Sprintf("%.0f", cs.TotalBandwidth)
}
