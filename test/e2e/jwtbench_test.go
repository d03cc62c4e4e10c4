package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// 'iotsafe bench jwt --quick' checks the harness of paper 004's lab: a real hub with its
// front door, plain REST listener and metrics, the simulator over each transport, the
// hub's JWT histograms read over each window, every output file, and no process left.
// Its figures are not measurements: only counts are checked.
func TestBenchJWTQuick(t *testing.T) {
	// --prefill: each start of the hub finds a store that already holds readings.
	r := runBench(t, []string{"runs.csv", "points.csv", "environment.json", "summary.json", "report.html"}, "jwt", "--quick", "--algs", "none,HS512", "--prefill", "3")
	out := r.out
	var s struct {
		Points []struct {
			Transport  string  `json:"transport"`
			Alg        string  `json:"alg"`
			Complete   float64 `json:"complete"`
			Incomplete float64 `json:"incomplete"`
			JWT        float64 `json:"jwt_us"`
			Signature  float64 `json:"signature_us"`
		} `json:"points"`
		Table2 []struct {
			Alg string `json:"alg"`
		} `json:"table2"`
		Options struct {
			Prefill int `json:"prefill_per_device"`
		} `json:"options"`
	}
	b := r.summary(t, &s)
	if s.Options.Prefill != 3 {
		t.Errorf("summary options: prefill %d, want 3", s.Options.Prefill)
	}
	seen := map[string]bool{}
	for _, p := range s.Points {
		key := p.Transport + "/" + p.Alg
		seen[key] = true
		if p.Complete == 0 || p.Incomplete != 0 {
			t.Errorf("%s: %v complete, %v incomplete notifications", key, p.Complete, p.Incomplete)
		}
		switch {
		case p.Transport == "ssh" && (p.Alg != "" || p.JWT != 0):
			t.Errorf("the SSH path verified tokens: %+v", p)
		case p.Transport != "ssh" && p.JWT == 0:
			t.Errorf("%s: the hub's JWT histogram was not read", key)
		case p.Alg == "HS512" && p.Signature == 0:
			t.Errorf("%s: no signature time", key)
		case p.Alg == "none" && p.Signature != 0:
			t.Errorf("%s: an unsigned token had its signature checked", key)
		}
	}
	for _, want := range []string{"https/none", "https/HS512", "https-new/none", "https-new/HS512", "ssh/"} {
		if !seen[want] {
			t.Errorf("no point for %s in %s", want, b)
		}
	}
	if len(s.Table2) != 2 {
		t.Errorf("table 2 has %d rows, want none and HS512", len(s.Table2))
	}
	runs, _ := os.ReadFile(filepath.Join(out, "runs.csv"))
	if !strings.Contains(string(runs), "disconnects") || strings.Count(string(runs), "\n") != 6 {
		t.Errorf("runs.csv: want a header and 5 runs:\n%s", runs)
	}
	if html, _ := os.ReadFile(filepath.Join(out, "report.html")); !strings.Contains(string(html), "paper 004") || !strings.Contains(string(html), "Fig. 5") {
		t.Error("report.html lacks the paper's figures")
	}
	r.nothingLeft(t)
}

// 'bench jwt --store postgres' runs the hub on a PostgreSQL registry and store: on a
// scratch server the lab starts (whose CPU time it measures), or on an operator's empty
// database, which is refused once it holds something. Figures are not looked at.
func TestBenchJWTOnPostgreSQL(t *testing.T) {
	args := []string{"jwt", "--quick", "--algs", "HS256", "--transports", "https", "--prefill", "2"}
	type point struct {
		Complete   float64 `json:"complete"`
		Incomplete float64 `json:"incomplete"`
		StoreCPU   float64 `json:"store_cpu_us_per_request"`
		StoreMiB   float64 `json:"store_pss_mib"`
	}
	var s struct {
		Points  []point `json:"points"`
		Options struct {
			Store string `json:"store"`
		} `json:"options"`
	}
	check := func(r benchRun, wantStore string, wantCPU bool, points int) {
		t.Helper()
		b := r.summary(t, &s)
		if !strings.Contains(s.Options.Store, wantStore) || len(s.Points) != points {
			t.Fatalf("summary: want the store %q and %d points:\n%s", wantStore, points, b)
		}
		for _, p := range s.Points {
			if p.Complete == 0 || p.Incomplete != 0 || (p.StoreCPU > 0) != wantCPU || (p.StoreMiB > 0) != wantCPU {
				t.Errorf("point %+v: want notifications complete, PostgreSQL CPU and memory measured: %v", p, wantCPU)
			}
		}
		r.nothingLeft(t) // the scratch server too: it carries the run's tag
	}

	t.Run("scratch server", func(t *testing.T) {
		r := runBench(t, []string{"runs.csv", "points.csv", "summary.json", "report.html"}, append(args, "--store", "postgres")...)
		check(r, "scratch server", true, 1)
		if !strings.Contains(string(r.text), "PostgreSQL CPU µs/req") || !strings.Contains(string(r.text), "PostgreSQL MiB") {
			t.Errorf("the table has no PostgreSQL CPU or memory column:\n%s", r.text)
		}
	})

	t.Run("operator's database", func(t *testing.T) {
		dsn := pgscratch.Start(t).Database(t)
		// Two algorithms: the hub starts twice, and the store is emptied before each.
		r := runBench(t, []string{"summary.json"}, "jwt", "--quick", "--algs", "none,HS256", "--transports", "https", "--prefill", "2", "--registry", dsn)
		check(r, "PostgreSQL postgres://", false, 2)
		db, err := sqldb.OpenPostgres(context.Background(), dsn, sqldb.PostgresOptions{MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// The hub's notifications are in the operator's database, and of the prefill's
		// (5 devices x 2 before each start) only the second start's.
		var all, prefilled int
		err = db.QueryRowContext(context.Background(), `SELECT count(*), count(*) FILTER (WHERE parameters LIKE '%00000000-0000-4000%') FROM notifications`).Scan(&all, &prefilled)
		if err != nil || prefilled != 10 || all <= prefilled {
			t.Errorf("notifications in the operator's database: %d, of them %d prefilled (%v); want the run's and 10", all, prefilled, err)
		}
		// Now it holds a registry: a second run must not fill it again.
		out, err := exec.Command(iotsafeBin, append([]string{"bench"}, append(args, "--registry", dsn, "--out", t.TempDir())...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "must be an empty database") {
			t.Errorf("a second run on the same database: %v\n%s", err, out)
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--store", "mysql"}, `--store: "mysql" is not one of sqlite, postgres`},
			{[]string{"--store", "sqlite", "--registry", "postgres://x@/db"}, "goes with --store postgres"},
			{[]string{"--registry", "/var/lib/db"}, "is not a postgres:// URL"},
		} {
			out, err := exec.Command(iotsafeBin, append([]string{"bench", "jwt", "--quick", "--out", t.TempDir()}, c.args...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Errorf("%v: %v, want an error saying %q:\n%s", c.args, err, c.want, out)
			}
		}
	})
}
