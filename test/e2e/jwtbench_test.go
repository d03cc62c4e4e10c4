package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
