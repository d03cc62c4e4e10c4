package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 'iotsafe bench relay --quick' checks the relay lab's harness: a real centre and a
// real gateway hub, the gateway's backlog relayed into the centre's store and as many
// notifications posted to the centre over REST, every output file written, and no
// process left. Rates and CPU are not checked.
func TestBenchRelayQuick(t *testing.T) {
	run := runBench(t, []string{"reps.csv", "environment.json", "summary.json", "report.html"}, "relay", "--quick")
	var s struct {
		Options struct {
			Gateways      int `json:"gateways"`
			Notifications int `json:"notifications_per_gateway"`
		} `json:"options"`
		Reps []struct {
			Relay, Direct struct {
				Notifications int `json:"notifications"`
				Arrived       int `json:"arrived"`
				Duplicates    int `json:"duplicates"`
			}
		} `json:"reps"`
		Median struct {
			AllArrivedOnce bool `json:"all_arrived_once"`
		} `json:"median"`
	}
	b := run.summary(t, &s)
	if s.Options.Gateways != 1 || s.Options.Notifications != 200 || len(s.Reps) != 1 || !s.Median.AllArrivedOnce {
		t.Fatalf("summary: %s", b)
	}
	r := s.Reps[0]
	if r.Relay.Arrived != 200 || r.Relay.Duplicates != 0 || r.Direct.Arrived != 200 {
		t.Fatalf("rep: %+v", r)
	}
	if csv, _ := os.ReadFile(filepath.Join(run.out, "reps.csv")); strings.Count(string(csv), "\n") != 3 {
		t.Errorf("reps.csv: want a header and the two paths:\n%s", csv)
	}
	run.nothingLeft(t)
}
