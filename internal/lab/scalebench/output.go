package scalebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// The targets, checked in the same run.
const (
	TargetDevices      = 100_000
	TargetKiBPerDevice = 4.0
	TargetBack         = 30 * time.Second
	DescriptorLimit    = 20_000 // the hard RLIMIT_NOFILE of the machine the lab was built on
)

// Run measures, writes the result files into out and prints the summary on w.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench scale: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && res.Base.Sessions == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema  string `json:"schema"`
	Options struct {
		Gateways          int     `json:"gateways"`
		DevicesPerGateway int     `json:"devices_per_gateway"`
		Direct            int     `json:"direct"`
		WindowS           float64 `json:"window_s"`
		Concurrency       int     `json:"concurrency"`
		Quick             bool    `json:"quick"`
	} `json:"options"`
	Established struct {
		Behind int `json:"behind_gateways"`
		Direct int `json:"direct"`
	} `json:"established"`
	Centre struct {
		Base      Centre  `json:"gateways_only"`
		Behind    Centre  `json:"with_devices_behind_gateways"`
		Full      Centre  `json:"with_direct_devices_too"`
		KiBBehind float64 `json:"kib_per_device_behind_gateway"`
		KiBDirect float64 `json:"kib_per_direct_device"`
		FDsBehind float64 `json:"descriptors_per_device_behind_gateway"`
		FDsDirect float64 `json:"descriptors_per_direct_device"`
	} `json:"centre"`
	FirstSweep struct {
		Sweep
		Seconds float64 `json:"seconds"`
	} `json:"first_sweep"`
	Paths      []PathSummary     `json:"paths"`
	Recoveries []RecoverySummary `json:"recoveries"`
	Targets    Targets           `json:"targets"`
}

// PathSummary is one path's load.
type PathSummary struct {
	Name                  string  `json:"name"`
	Devices               int     `json:"devices"`
	RPS                   float64 `json:"rps"`
	Errors                int64   `json:"errors"`
	FirstError            string  `json:"first_error,omitempty"`
	CentreCPUPerRequestUS float64 `json:"centre_cpu_us_per_request"`
	GatewayCPUPerReqUS    float64 `json:"gateways_cpu_us_per_request"`
}

// RecoverySummary is one restart.
type RecoverySummary struct {
	What       string  `json:"what"`
	Devices    int     `json:"devices"`
	StopMS     float64 `json:"stop_ms"`
	HubStartMS float64 `json:"hub_start_ms"`
	ServedS    float64 `json:"served_s"` // -1: not every device served again
	BackS      float64 `json:"back_s"`   // -1: not every device answered
	Answered   int     `json:"answered"`
	AtFirstAsk int     `json:"answered_at_first_ask"`
	Moved      int     `json:"moved"`
	FirstError string  `json:"first_error,omitempty"`
	// Failed names the devices that failed their first ask (at most 20), when and why.
	Failed []string `json:"failed,omitempty"`
}

// Targets are the issue's, as this run met them.
type Targets struct {
	Devices         int     `json:"devices"`
	DevicesMet      bool    `json:"devices_met"`
	KiBPerDevice    float64 `json:"kib_per_device"`
	MemoryMet       bool    `json:"memory_met"`
	BackS           float64 `json:"back_s"`     // every device served again after a centre restart
	AnsweredS       float64 `json:"answered_s"` // and every one answered a request (the sweep included)
	BackMet         bool    `json:"back_met"`
	DescriptorLimit int     `json:"descriptor_limit"`
	DescriptorsMet  bool    `json:"descriptors_met"`
}

func per(delta float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return delta / float64(n)
}

// Summarize turns results into summary.json.
func Summarize(r *Results) Summary {
	var s Summary
	s.Schema = "iotsafe.bench.scale/1"
	o := r.Options
	s.Options.Gateways, s.Options.DevicesPerGateway, s.Options.Direct = o.Gateways, o.Devices, o.Direct
	s.Options.WindowS, s.Options.Concurrency, s.Options.Quick = o.Window.Seconds(), o.Concurrency, o.Quick
	s.Established.Behind, s.Established.Direct = r.Behind, r.Direct
	c := &s.Centre
	c.Base, c.Behind, c.Full = r.Base, r.Behind1, r.Full
	c.KiBBehind = per(float64(r.Behind1.PSSKiB-r.Base.PSSKiB), r.Behind)
	c.KiBDirect = per(float64(r.Full.PSSKiB-r.Behind1.PSSKiB), r.Direct)
	c.FDsBehind = per(float64(r.Behind1.FDs-r.Base.FDs), r.Behind)
	c.FDsDirect = per(float64(r.Full.FDs-r.Behind1.FDs), r.Direct)
	s.FirstSweep.Sweep, s.FirstSweep.Seconds = r.First, r.First.Elapsed.Seconds()
	for _, p := range r.Paths {
		ps := PathSummary{Name: p.Name, Devices: p.Devices, RPS: p.Load.RPS(), Errors: p.Load.Errors, FirstError: p.Load.FirstErr}
		if n := p.Load.Requests; n > 0 {
			ps.CentreCPUPerRequestUS = float64(p.CentreCPU.Microseconds()) / float64(n)
			ps.GatewayCPUPerReqUS = float64(p.GatewayCPU.Microseconds()) / float64(n)
		}
		s.Paths = append(s.Paths, ps)
	}
	t := &s.Targets
	t.BackS = -1
	for _, rc := range r.Recoveries {
		rs := RecoverySummary{What: rc.What, Devices: rc.Devices, StopMS: float64(rc.Stop.Microseconds()) / 1000, HubStartMS: float64(rc.HubStart.Microseconds()) / 1000,
			ServedS: -1, BackS: -1, Answered: rc.Answered, AtFirstAsk: rc.AtFirstAsk, Moved: rc.Moved, FirstError: rc.FirstErr, Failed: rc.Failed}
		if rc.Back >= 0 {
			rs.BackS = rc.Back.Seconds()
		}
		if rc.Served >= 0 {
			rs.ServedS = rc.Served.Seconds()
		}
		s.Recoveries = append(s.Recoveries, rs)
		if rc.What == "centre" {
			// Served again within the target, on the same addresses, and every device
			// answered the first request it got after that (the sweep's own length is
			// reported, not held against the target: it is the load generator's rate).
			t.BackS, t.AnsweredS = rs.ServedS, rs.BackS
			t.BackMet = rc.Served >= 0 && rc.Served <= TargetBack && rc.AtFirstAsk == rc.Devices && rc.Moved == 0
		}
	}
	t.Devices = r.Behind
	// Established and each answering a request: at the first attempt or, for a request
	// lost under the sweep's load, the second (both counts are in the summary).
	t.DevicesMet = r.Behind >= TargetDevices && r.First.Answered+r.First.Retried == r.First.Devices
	t.KiBPerDevice = c.KiBBehind
	// A negative figure is noise (a garbage collection between two readings), not a pass.
	t.MemoryMet = r.Behind > 0 && c.KiBBehind > 0 && c.KiBBehind <= TargetKiBPerDevice
	t.DescriptorLimit = DescriptorLimit
	t.DescriptorsMet = r.Full.FDs > 0 && r.Full.FDs < DescriptorLimit
	return s
}

// Write writes summary.json, environment.json, paths.csv and report.html.
func Write(dir string, env lab.Environment, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "paths.csv"), []string{"path", "devices", "rps", "errors", "centre_cpu_us_per_request", "gateways_cpu_us_per_request"}, func(w func(...string)) {
		for _, p := range s.Paths {
			w(p.Name, fmt.Sprint(p.Devices), fmt.Sprintf("%.1f", p.RPS), fmt.Sprint(p.Errors), fmt.Sprintf("%.1f", p.CentreCPUPerRequestUS), fmt.Sprintf("%.1f", p.GatewayCPUPerReqUS))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, reportTmpl, map[string]any{"Title": "iotsafe bench scale", "S": s})
}

// Print writes the summary for a terminal.
func Print(w io.Writer, s Summary) {
	o, c := s.Options, s.Centre
	fmt.Fprintf(w, "\n%d gateways x %d devices behind them, %d devices direct, one central hub\n", o.Gateways, o.DevicesPerGateway, o.Direct)
	fmt.Fprintf(w, "  established at the centre: %d behind gateways, %d direct; first sweep: %d of %d answered in %.1f s\n",
		s.Established.Behind, s.Established.Direct, s.FirstSweep.Answered, s.FirstSweep.Devices, s.FirstSweep.Seconds)
	if f := s.FirstSweep; f.Answered < f.Devices {
		fmt.Fprintf(w, "    %d failed (%s), %d of them answered a second request; failed: %s\n",
			f.Devices-f.Answered, f.FirstErr, f.Retried, strings.Join(f.Failed, ", "))
	}
	fmt.Fprintf(w, "  centre memory (PSS) per device: %.2f KiB behind a gateway, %.1f KiB direct; descriptors per device %.3f behind, %.2f direct; %d descriptors in all\n",
		c.KiBBehind, c.KiBDirect, c.FDsBehind, c.FDsDirect, c.Full.FDs)
	for _, p := range s.Paths {
		fmt.Fprintf(w, "  %-16s %8.0f req/s, centre CPU %.0f us/request, gateways %.0f us/request, %d errors\n", p.Name, p.RPS, p.CentreCPUPerRequestUS, p.GatewayCPUPerReqUS, p.Errors)
	}
	if len(s.Paths) == 2 && s.Paths[1].RPS > 0 {
		fmt.Fprintf(w, "  through gateways / direct: %.2fx the requests per second, %.2fx the centre's CPU per request\n",
			s.Paths[0].RPS/s.Paths[1].RPS, ratio(s.Paths[0].CentreCPUPerRequestUS, s.Paths[1].CentreCPUPerRequestUS))
	}
	for _, r := range s.Recoveries {
		back := fmt.Sprintf("every device served again %.1f s after the hub listened; asked from then on, %d of %d answered at the first ask, the last by %.1f s (the sweep's length)",
			r.ServedS, r.AtFirstAsk, r.Devices, r.BackS)
		if r.AtFirstAsk < r.Devices && len(r.Failed) > 0 {
			back += " (failed at the first ask: " + strings.Join(r.Failed, ", ") + ")"
		}
		switch {
		case r.BackS < 0:
			back = fmt.Sprintf("only %d of %d answered (%s)", r.Answered, r.Devices, r.FirstError)
		case r.ServedS < 0:
			back = fmt.Sprintf("not every device served again; all answered by %.1f s", r.BackS)
		}
		fmt.Fprintf(w, "  %s restart: stopped in %.0f ms, up again in %.0f ms; %s; %d moved socket address\n", r.What, r.StopMS, r.HubStartMS, back, r.Moved)
	}
	t := s.Targets
	fmt.Fprintf(w, "targets: %d devices at one centre (>= %d): %s; %.2f KiB per device behind a gateway (<= %g): %s; served again within %gs after a centre restart (%.1f s), same addresses, all answering: %s; descriptors under %d: %s\n",
		t.Devices, TargetDevices, lab.Verdict(t.DevicesMet), t.KiBPerDevice, TargetKiBPerDevice, lab.Verdict(t.MemoryMet),
		TargetBack.Seconds(), t.BackS, lab.Verdict(t.BackMet), t.DescriptorLimit, lab.Verdict(t.DescriptorsMet))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

var reportTmpl = lab.NewReport(`{{template "head" .}}
<h1>A central hub with its gateways</h1>
<p class="note">{{template "env" .Env}}.
{{.S.Options.Gateways}} gateway hubs, each in its own network namespace joined to the centre's by a veth pair and a bridge, each with {{.S.Options.DevicesPerGateway}} simulated devices (SSH sessions with one reverse alias), relayed to one central hub over one SSH session per gateway; {{.S.Options.Direct}} devices connect to the centre directly. Requests come from the centre's namespace to the devices' protected sockets there.</p>
<table><tr><th>centre</th><th>sessions</th><th>PSS KiB</th><th>descriptors</th></tr>
<tr><td>gateways only</td><td>{{.S.Centre.Base.Sessions}}</td><td>{{.S.Centre.Base.PSSKiB}}</td><td>{{.S.Centre.Base.FDs}}</td></tr>
<tr><td>with the devices behind them</td><td>{{.S.Centre.Behind.Sessions}}</td><td>{{.S.Centre.Behind.PSSKiB}}</td><td>{{.S.Centre.Behind.FDs}}</td></tr>
<tr><td>with the direct devices too</td><td>{{.S.Centre.Full.Sessions}}</td><td>{{.S.Centre.Full.PSSKiB}}</td><td>{{.S.Centre.Full.FDs}}</td></tr></table>
<p>Per device at the centre: {{f "%.2f" .S.Centre.KiBBehind}} KiB and {{f "%.3f" .S.Centre.FDsBehind}} descriptors behind a gateway; {{f "%.1f" .S.Centre.KiBDirect}} KiB and {{f "%.2f" .S.Centre.FDsDirect}} descriptors direct.</p>
<table><tr><th>path</th><th>devices</th><th>req/s</th><th>errors</th><th>centre CPU µs/request</th><th>gateways' CPU µs/request</th></tr>
{{range .S.Paths}}<tr><td>{{.Name}}</td><td>{{.Devices}}</td><td>{{f "%.0f" .RPS}}</td><td>{{.Errors}}</td><td>{{f "%.0f" .CentreCPUPerRequestUS}}</td><td>{{f "%.0f" .GatewayCPUPerReqUS}}</td></tr>{{end}}</table>
<table><tr><th>restart</th><th>devices</th><th>stop ms</th><th>start ms</th><th>every device served again after s</th><th>answered at the first ask</th><th>every device answered after s</th><th>moved</th></tr>
{{range .S.Recoveries}}<tr><td>{{.What}}</td><td>{{.Devices}}</td><td>{{f "%.0f" .StopMS}}</td><td>{{f "%.0f" .HubStartMS}}</td><td>{{if lt .ServedS 0.0}}not all{{else}}{{f "%.1f" .ServedS}}{{end}}</td><td>{{.AtFirstAsk}}</td><td>{{if lt .BackS 0.0}}not all ({{.Answered}}){{else}}{{f "%.1f" .BackS}}{{end}}</td><td>{{.Moved}}</td></tr>{{end}}</table>
<p>Targets: {{.S.Targets.Devices}} devices at one centre (≥ 100,000) — <b>{{if .S.Targets.DevicesMet}}met{{else}}not met{{end}}</b>; {{f "%.2f" .S.Targets.KiBPerDevice}} KiB per device behind a gateway (≤ 4) — <b>{{if .S.Targets.MemoryMet}}met{{else}}not met{{end}}</b>; every device back within 30 s of a centre restart on the same address — <b>{{if .S.Targets.BackMet}}met{{else}}not met{{end}}</b>; descriptors under {{.S.Targets.DescriptorLimit}} — <b>{{if .S.Targets.DescriptorsMet}}met{{else}}not met{{end}}</b>.</p>
<p class="note">The lab's simulated devices do not reconnect by themselves: after a gateway restart its fleet is started again as soon as the gateway listens (real agents retry within seconds; see bench outage), and the direct devices are stopped before the centre restarts (the recovery counts the devices behind gateways, which their gateways bring back). Raw data: paths.csv, summary.json (schema in docs/bench.md), environment.json.</p>
</body></html>
`)
