package enrolbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench enrol: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && len(res.Ways) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema      string    `json:"schema"`
	Devices     int       `json:"devices"`
	Concurrency int       `json:"concurrency"`
	Quick       bool      `json:"quick"`
	Ways        []wayJSON `json:"ways"`
	// JoinOverImport is the join path's enrolments per second over the bulk import's;
	// CertOverImport the zero-touch certificate path's.
	JoinOverImport float64 `json:"join_over_import_per_s"`
	CertOverImport float64 `json:"certificate_over_import_per_s"`
}

type wayJSON struct {
	Way           string         `json:"way"`
	Devices       int            `json:"devices"`
	Failures      int            `json:"failures"`
	Errors        map[string]int `json:"errors,omitempty"`
	ElapsedS      float64        `json:"elapsed_s"`
	PerS          float64        `json:"per_s"`
	HubCPUUs      float64        `json:"hub_cpu_us_per_device"`
	Base          lab.Memory     `json:"base"`
	After         lab.Memory     `json:"after"`
	PSSPerKiB     float64        `json:"hub_pss_kib_per_device"`
	RegistryBytes float64        `json:"registry_bytes_per_device"`
}

// Summarize turns results into summary.json's figures.
func Summarize(res Results) Summary {
	s := Summary{Schema: "iotsafe-bench-enrol/1", Devices: res.Options.Devices, Concurrency: res.Options.Concurrency, Quick: res.Options.Quick}
	rate := map[string]float64{}
	for _, w := range res.Ways {
		j := wayJSON{Way: w.Name, Devices: w.Devices, Failures: w.Failures, Errors: w.Errors, ElapsedS: w.Elapsed.Seconds(), Base: w.Base, After: w.After}
		if w.Elapsed > 0 {
			j.PerS = float64(w.Devices) / w.Elapsed.Seconds()
		}
		if w.Devices > 0 {
			j.HubCPUUs = float64(w.HubCPU.Microseconds()) / float64(w.Devices)
			j.PSSPerKiB = float64(w.After.PSS-w.Base.PSS) / float64(w.Devices)
			j.RegistryBytes = float64(w.RegAfter-w.RegBase) / float64(w.Devices)
		}
		rate[w.Name] = j.PerS
		s.Ways = append(s.Ways, j)
	}
	if rate[WayImport] > 0 {
		s.JoinOverImport = rate[WayJoin] / rate[WayImport]
		s.CertOverImport = rate[WayCert] / rate[WayImport]
	}
	return s
}

// Write writes ways.csv, environment.json, summary.json and report.html.
func Write(dir string, env lab.Environment, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "ways.csv"), []string{"way", "devices", "failures", "elapsed_s", "per_s", "hub_cpu_us", "hub_pss_kib_per_device", "registry_bytes_per_device"}, func(row func(...string)) {
		for _, w := range s.Ways {
			row(w.Way, fmt.Sprint(w.Devices), fmt.Sprint(w.Failures), fmt.Sprintf("%.2f", w.ElapsedS), fmt.Sprintf("%.0f", w.PerS), fmt.Sprintf("%.0f", w.HubCPUUs), fmt.Sprintf("%.2f", w.PSSPerKiB), fmt.Sprintf("%.0f", w.RegistryBytes))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, report, map[string]any{"Title": "iotsafe bench enrol", "S": s})
}

var report = lab.NewReport(`{{template "head" .}}
<h1>Enrolling a fleet: join tokens and manufacturers' certificates beside the operator's bulk import</h1>
<p class="note">{{template "env" .Env}}</p>
<p>{{.S.Devices}} devices, each with a key made on its side, enrol it with one join token over SSH, {{.S.Concurrency}} at once;
on a fresh hub, the same number log in once each with a certificate of a manufacturer's CA the hub trusts (zero-touch);
then, on a fresh hub, the same number of keys are enrolled by one <code>iotsafe device import</code> through the running hub.</p>
<table><tr><th>way</th><th>enrolled</th><th>failed</th><th>s</th><th>per s</th><th>hub CPU µs each</th><th>hub PSS per device</th><th>registry per device</th></tr>
{{range .S.Ways}}<tr><td>{{.Way}}</td><td>{{.Devices}}</td><td>{{.Failures}}</td><td>{{f "%.2f" .ElapsedS}}</td><td>{{f "%.0f" .PerS}}</td><td>{{f "%.0f" .HubCPUUs}}</td><td>{{f "%.2f KiB" .PSSPerKiB}}</td><td>{{f "%.0f B" .RegistryBytes}}</td></tr>
{{end}}</table>
<p>Join tokens enrol {{f "%.2f" .S.JoinOverImport}}×, certificates {{f "%.2f" .S.CertOverImport}}× the bulk import's devices per second.</p>
</body></html>`)

// Print writes the summary for people.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\n%-14s %8s %7s %8s %8s %12s %14s %14s\n", "way", "enrolled", "failed", "s", "per s", "hub CPU µs", "PSS/device", "registry/device")
	for _, x := range s.Ways {
		fmt.Fprintf(w, "%-14s %8d %7d %8.2f %8.0f %12.0f %10.2f KiB %12.0f B\n", x.Way, x.Devices, x.Failures, x.ElapsedS, x.PerS, x.HubCPUUs, x.PSSPerKiB, x.RegistryBytes)
		for e, n := range x.Errors {
			fmt.Fprintf(w, "  %d x %s\n", n, e)
		}
	}
	fmt.Fprintf(w, "\njoin tokens enrol %.2fx, certificates %.2fx the bulk import's devices per second\n", s.JoinOverImport, s.CertOverImport)
}
