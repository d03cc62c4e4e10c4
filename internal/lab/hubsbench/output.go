package hubsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Issue 18's targets.
const (
	TargetRevoke   = time.Second
	TargetRecovery = 30 * time.Second
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench hubs: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && res.Up == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema iotsafe.bench.hubs/1, docs/bench.md).
type Summary struct {
	Schema  string  `json:"schema"`
	Hubs    int     `json:"hubs"`
	Devices int     `json:"devices"`
	Quick   bool    `json:"quick"`
	UpS     float64 `json:"fleet_up_s"`
	Through struct {
		OK       int    `json:"answered"`
		N        int    `json:"sockets"`
		FirstErr string `json:"first_error,omitempty"`
	} `json:"through_peer"`
	RevokeMS  Dist    `json:"revoke_ms"`  // from the command's start to the session gone at the holding hub
	CommandMS Dist    `json:"command_ms"` // the command alone, its process start included
	RecoveryS float64 `json:"recovery_s"` // -1: not every device answered
	Answered  int     `json:"answered"`
	Expected  int     `json:"expected"`
	Targets   Targets `json:"targets"`
}

// Dist summarises durations in milliseconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	Max float64 `json:"max"`
}

// Targets are the issue's, as measured.
type Targets struct {
	RevokeUnder1s     bool `json:"revoke_under_1s"`
	RecoveryWithin30s bool `json:"recovery_within_30s"`
}

func dist(ds []time.Duration) Dist {
	var v []float64
	for _, d := range ds {
		v = append(v, float64(d.Microseconds())/1000)
	}
	out := Dist{N: len(v)}
	for _, x := range v {
		out.Max = max(out.Max, x)
	}
	out.P50 = lab.Median(v)
	return out
}

// Summarize reduces Results to the summary.
func Summarize(r *Results) Summary {
	s := Summary{Schema: "iotsafe.bench.hubs/1", Hubs: r.Options.Hubs, Devices: r.Options.Devices, Quick: r.Options.Quick, UpS: r.Up.Seconds(),
		RevokeMS: dist(r.Revoke), CommandMS: dist(r.Command), RecoveryS: -1, Answered: r.Answered, Expected: r.Expected}
	s.Through.OK, s.Through.N, s.Through.FirstErr = r.ThroughOK, r.ThroughN, r.ThroughErr
	if r.Recovery >= 0 && r.Expected > 0 {
		s.RecoveryS = r.Recovery.Seconds()
	}
	s.Targets.RevokeUnder1s = s.RevokeMS.N > 0 && time.Duration(s.RevokeMS.Max*float64(time.Millisecond)) < TargetRevoke
	s.Targets.RecoveryWithin30s = s.RecoveryS >= 0 && s.RecoveryS < TargetRecovery.Seconds()
	return s
}

// Write writes revokes.csv, summary.json, environment.json and report.html.
func Write(dir string, env lab.Environment, r *Results, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "revokes.csv"), []string{"n", "command_ms", "revoke_ms"}, func(w func(...string)) {
		for i := range r.Revoke {
			w(fmt.Sprint(i+1), fmt.Sprintf("%.3f", float64(r.Command[i].Microseconds())/1000), fmt.Sprintf("%.3f", float64(r.Revoke[i].Microseconds())/1000))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench hubs", "S": s})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\n%d hubs on one PostgreSQL registry, %d agents (every hub in their list), all at the first hub first\n", s.Hubs, s.Devices)
	fmt.Fprintf(w, "  fleet up in %.1f s; through the last hub (peer link): %d of %d sockets answered\n", s.UpS, s.Through.OK, s.Through.N)
	fmt.Fprintf(w, "  revocation written at the last hub, session gone at the first: p50 %.0f ms, max %.0f ms (the command alone: p50 %.0f ms)\n",
		s.RevokeMS.P50, s.RevokeMS.Max, s.CommandMS.P50)
	if s.RecoveryS >= 0 {
		fmt.Fprintf(w, "  first hub killed: all %d remaining devices answered through the others %.1f s later\n", s.Expected, s.RecoveryS)
	} else {
		fmt.Fprintf(w, "  first hub killed: only %d of %d remaining devices answered through the others\n", s.Answered, s.Expected)
	}
	fmt.Fprintf(w, "targets: revoke at the holding hub under 1 s: %s; every device of a killed hub reachable within 30 s: %s\n",
		lab.Verdict(s.Targets.RevokeUnder1s), lab.Verdict(s.Targets.RecoveryWithin30s))
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>Several hubs on one registry</h1>
<p class="note">{{template "env" .Env}}. {{.S.Hubs}} hubs, each in a network namespace of its own on one Ethernet segment, share a PostgreSQL registry (a scratch server started by the lab, durable settings); {{.S.Devices}} real agents in another namespace list every hub and start at the first.</p>
<table><tr><th>measure</th><th>value</th><th>target</th></tr>
<tr><td>fleet up at the first hub</td><td>{{f "%.1f" .S.UpS}} s</td><td>–</td></tr>
<tr><td>sockets answering through the last hub (peer link)</td><td>{{.S.Through.OK}} of {{.S.Through.N}}</td><td>–</td></tr>
<tr><td>revocation written at the last hub → session gone at the first (p50 / max, n={{.S.RevokeMS.N}})</td><td>{{f "%.0f" .S.RevokeMS.P50}} / {{f "%.0f" .S.RevokeMS.Max}} ms</td><td>under 1 s: <b>{{if .S.Targets.RevokeUnder1s}}met{{else}}not met{{end}}</b></td></tr>
<tr><td>the revoke command alone (its process start included), p50</td><td>{{f "%.0f" .S.CommandMS.P50}} ms</td><td>–</td></tr>
<tr><td>first hub killed → every remaining device answers through the others</td><td>{{if ge .S.RecoveryS 0.0}}{{f "%.1f" .S.RecoveryS}} s{{else}}{{.S.Answered}} of {{.S.Expected}}{{end}}</td><td>within 30 s: <b>{{if .S.Targets.RecoveryWithin30s}}met{{else}}not met{{end}}</b></td></tr>
</table>
<p class="note">The revocation is timed from the start of 'iotsafe device revoke' at the last hub's data folder to the first hub no longer listing the device online (asked every 2 ms). The recovery is timed from the SIGKILL to the last device answering a request made from the last hub's namespace; agents retry a lost hub after 2.5–5 s and move to the next hub of their list. Raw data: revokes.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`)
