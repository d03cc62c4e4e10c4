package lab

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Environment describes the machine and the peers of a run.
type Environment struct {
	Time     time.Time         `json:"time"`
	Host     string            `json:"host"`
	CPU      string            `json:"cpu"`
	Cores    int               `json:"cores"`
	Kernel   string            `json:"kernel"`
	Go       string            `json:"go"`
	Commit   string            `json:"commit"`
	Versions map[string]string `json:"versions"`
	Quick    bool              `json:"quick"`
}

// ReadEnvironment collects the environment; missing pieces are left empty.
func ReadEnvironment(quick bool) Environment {
	e := Environment{Time: time.Now().UTC(), Cores: runtime.NumCPU(), Go: runtime.Version(), Quick: quick, Versions: map[string]string{}}
	e.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				e.Commit = s.Value
			}
		}
	}
	if e.Commit == "" {
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
			e.Commit = strings.TrimSpace(string(out))
		}
	}
	if e.Commit == "" {
		e.Commit = "unknown (built outside a git checkout)" // never a bare "commit ,"
	}
	version := func(name string, argv ...string) {
		out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if line := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]); line != "" {
			e.Versions[name] = line
		}
	}
	version("openssh", "/usr/sbin/sshd", "-V")
	version("dropbear", "dropbear", "-V")
	version("caddy", "caddy", "version")
	version("mosquitto", "mosquitto", "-h")
	return e
}

// WriteRunFiles writes environment.json and summary.json, and creates report.html for
// the caller to fill.
func WriteRunFiles(dir string, env Environment, summary any) (*os.File, error) {
	for name, v := range map[string]any{"environment.json": env, "summary.json": summary} {
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	return os.Create(filepath.Join(dir, "report.html"))
}

// WriteRun writes environment.json and summary.json and renders report into
// report.html with data, "Env" added; a report not completely written is an error.
func WriteRun(dir string, env Environment, summary any, report *template.Template, data map[string]any) error {
	f, err := WriteRunFiles(dir, env, summary)
	if err != nil {
		return err
	}
	data["Env"] = env
	if err := report.Execute(f, data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func WriteCSV(path string, header []string, rows func(func(...string))) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write(header)
	rows(func(v ...string) { w.Write(v) })
	w.Flush()
	return w.Error()
}

// PrintGrid prints server -> (numeric key -> value) as one line per server; tail, if
// set, adds to each line.
func PrintGrid(w io.Writer, title string, m map[string]map[string]float64, cell string, tail func(string) string) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintln(w, "\n"+title)
	for _, server := range SortedKeys(m) {
		fmt.Fprintf(w, "  %-9s", server)
		for _, k := range SortedNumKeys(m[server]) {
			fmt.Fprintf(w, "  "+cell, k, m[server][k])
		}
		if tail != nil {
			fmt.Fprint(w, tail(server))
		}
		fmt.Fprintln(w)
	}
}

// SortedNumKeys sorts keys that are decimal numbers by value.
func SortedNumKeys(m map[string]float64) []string {
	keys := SortedKeys(m)
	slices.SortFunc(keys, func(a, b string) int {
		var x, y int
		fmt.Sscan(a, &x)
		fmt.Sscan(b, &y)
		return x - y
	})
	return keys
}

func SortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func FmtOpt(m map[string]float64, k string) string {
	if v, ok := m[k]; ok {
		return fmt.Sprintf("%.2f", v)
	}
	return "–"
}

// Median is the median of v (sorted in place); 0 for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// Finish ends a lab's run once something was measured: it writes the files, prints the
// summary and where the report is. A run interrupted by Ctrl-C (measureErr is
// context.Canceled) keeps what it measured and is no error; another measureErr is
// returned after the files are written.
func Finish(w io.Writer, out string, measureErr error, write func() error, print func(io.Writer)) error {
	if err := write(); err != nil {
		return err
	}
	print(w)
	fmt.Fprintf(w, "\nreport: %s\n", filepath.Join(out, "report.html"))
	if errors.Is(measureErr, context.Canceled) {
		return nil
	}
	return measureErr
}

// Default sets an option left at zero: full for a real run, quick for a --quick one
// (which checks the harness with small numbers).
func Default[T int | time.Duration](v *T, quick bool, full, quickValue T) {
	if *v == 0 {
		*v = full
		if quick {
			*v = quickValue
		}
	}
}

// Dist summarizes per-device times in milliseconds; Missing readings (negative: a
// device that never came) are not in it.
type Dist struct {
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Missing int     `json:"missing"`
}

// DistOf summarizes readings; negative ones are missing devices.
func DistOf(ds []time.Duration) Dist {
	var v []float64
	d := Dist{}
	for _, x := range ds {
		if x < 0 {
			d.Missing++
			continue
		}
		v = append(v, float64(x)/float64(time.Millisecond))
	}
	if len(v) == 0 {
		return d
	}
	slices.Sort(v)
	q := func(p float64) float64 { return v[max(0, min(len(v)-1, int(math.Ceil(p*float64(len(v))))-1))] }
	d.P50, d.P90, d.P99, d.Max = q(0.5), q(0.9), q(0.99), v[len(v)-1]
	return d
}
