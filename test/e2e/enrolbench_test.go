package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 'iotsafe bench enrol --quick' checks the enrolment lab's harness: devices join a real
// hub with one token over SSH, log in with a manufacturer's certificate on a fresh hub
// (zero-touch), the same keys are imported on a third, every device
// enrolled each way, every output file written, and no process left. Rates, memory and
// sizes are not checked.
func TestBenchEnrolQuick(t *testing.T) {
	run := runBench(t, []string{"ways.csv", "environment.json", "summary.json", "report.html"}, "enrol", "--quick")
	var s struct {
		Devices int `json:"devices"`
		Ways    []struct {
			Way      string `json:"way"`
			Devices  int    `json:"devices"`
			Failures int    `json:"failures"`
		} `json:"ways"`
	}
	b := run.summary(t, &s)
	if s.Devices != 20 || len(s.Ways) != 3 {
		t.Fatalf("summary: %s", b)
	}
	for _, w := range s.Ways {
		if w.Devices != 20 || w.Failures != 0 {
			t.Errorf("%s: %d enrolled, %d failed", w.Way, w.Devices, w.Failures)
		}
	}
	if csv, _ := os.ReadFile(filepath.Join(run.out, "ways.csv")); strings.Count(string(csv), "\n") != 4 {
		t.Errorf("ways.csv: want a header and three ways:\n%s", csv)
	}
	run.nothingLeft(t)
}
