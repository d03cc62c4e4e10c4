package e2e

import (
	"testing"
)

// 'iotsafe bench console --quick' checks the console lab's harness: a hub with a filled
// registry, a login, every page fetched, every output file written, no process left.
// Times are not checked.
func TestBenchConsoleQuick(t *testing.T) {
	run := runBench(t, []string{"pages.csv", "environment.json", "summary.json", "report.html"}, "console", "--quick")
	var s struct {
		Devices int `json:"devices"`
		Pages   []struct {
			Page  string `json:"page"`
			Bytes int    `json:"bytes"`
		} `json:"pages"`
	}
	b := run.summary(t, &s)
	if s.Devices != 200 || len(s.Pages) != 8 {
		t.Fatalf("summary: %s", b)
	}
	for _, p := range s.Pages {
		if p.Bytes == 0 {
			t.Errorf("%s: an empty page", p.Page)
		}
	}
	run.nothingLeft(t)
}
