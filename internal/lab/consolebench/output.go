package consolebench

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
	fmt.Fprintf(w, "bench console: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) && len(res.Pages) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), s) }, func(w io.Writer) { Print(w, s) })
}

// Summary is summary.json (schema in docs/bench.md).
type Summary struct {
	Schema   string     `json:"schema"`
	Devices  int        `json:"devices"`
	Requests int        `json:"requests_per_page"`
	Quick    bool       `json:"quick"`
	EnrolS   float64    `json:"enrol_s"`
	TargetMS float64    `json:"target_ms"`
	Pages    []pageJSON `json:"pages"`
	// WorstP95MS is the slowest page's 95th percentile; WithinTarget whether every
	// page's 95th percentile is within TargetMS.
	WorstP95MS   float64 `json:"worst_p95_ms"`
	WithinTarget bool    `json:"within_target"`
}

type pageJSON struct {
	Page   string  `json:"page"`
	Path   string  `json:"path"`
	Bytes  int     `json:"bytes"`
	P50MS  float64 `json:"p50_ms"`
	P95MS  float64 `json:"p95_ms"`
	MaxMS  float64 `json:"max_ms"`
	Within bool    `json:"within_target"`
}

func ms(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1000 }

// Summarize turns results into summary.json's figures.
func Summarize(res Results) Summary {
	s := Summary{Schema: "iotsafe-bench-console/1", Devices: res.Options.Devices, Requests: res.Options.Requests, Quick: res.Options.Quick,
		EnrolS: res.Enrol.Seconds(), TargetMS: TargetMS, WithinTarget: len(res.Pages) > 0}
	for _, p := range res.Pages {
		t := sortedTimes(p)
		j := pageJSON{Page: p.Name, Path: p.Path, Bytes: p.Bytes, P50MS: ms(quantile(t, .5)), P95MS: ms(quantile(t, .95)), MaxMS: ms(quantile(t, 1))}
		j.Within = j.P95MS <= TargetMS
		s.WithinTarget = s.WithinTarget && j.Within
		s.WorstP95MS = max(s.WorstP95MS, j.P95MS)
		s.Pages = append(s.Pages, j)
	}
	return s
}

// Write writes pages.csv, environment.json, summary.json and report.html.
func Write(dir string, env lab.Environment, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := lab.WriteCSV(filepath.Join(dir, "pages.csv"), []string{"page", "path", "bytes", "p50_ms", "p95_ms", "max_ms"}, func(row func(...string)) {
		for _, p := range s.Pages {
			row(p.Page, p.Path, fmt.Sprint(p.Bytes), fmt.Sprintf("%.1f", p.P50MS), fmt.Sprintf("%.1f", p.P95MS), fmt.Sprintf("%.1f", p.MaxMS))
		}
	}); err != nil {
		return err
	}
	return lab.WriteRun(dir, env, s, report, map[string]any{"Title": "iotsafe bench console", "S": s})
}

var report = lab.NewReport(`{{template "head" .}}
<h1>The operator console's pages with {{.S.Devices}} devices</h1>
<p class="note">{{template "env" .Env}}</p>
<p>A hub whose registry holds {{.S.Devices}} devices (SQLite); each page fetched {{.S.Requests}} times over HTTPS by a logged-in client, to the last byte. Target: {{f "%.0f" .S.TargetMS}} ms.</p>
<table><tr><th>page</th><th>bytes</th><th>median ms</th><th>95th ms</th><th>worst ms</th><th>within</th></tr>
{{range .S.Pages}}<tr><td>{{.Page}}</td><td>{{.Bytes}}</td><td>{{f "%.1f" .P50MS}}</td><td>{{f "%.1f" .P95MS}}</td><td>{{f "%.1f" .MaxMS}}</td><td>{{if .Within}}yes{{else}}no{{end}}</td></tr>
{{end}}</table>
</body></html>`)

// Print writes the summary for people.
func Print(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\n%d devices (enrolled in %.0f s); %d requests per page; target %d ms\n", s.Devices, s.EnrolS, s.Requests, TargetMS)
	fmt.Fprintf(w, "%-32s %9s %10s %10s %10s\n", "page", "bytes", "median ms", "95th ms", "worst ms")
	for _, p := range s.Pages {
		mark := ""
		if !p.Within {
			mark = "  over the target"
		}
		fmt.Fprintf(w, "%-32s %9d %10.1f %10.1f %10.1f%s\n", p.Page, p.Bytes, p.P50MS, p.P95MS, p.MaxMS, mark)
	}
}
