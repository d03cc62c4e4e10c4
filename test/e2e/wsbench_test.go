package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 'iotsafe bench websocket --quick' checks the WebSocket lab's harness: a real hub, one
// device's notifications stored over REST and over the WebSocket API (each answered),
// subscribers and long polls held and their memory read, every output file written,
// and no process left. Rates and memory are not checked.
func TestBenchWebSocketQuick(t *testing.T) {
	run := runBench(t, []string{"paths.csv", "holdings.csv", "environment.json", "summary.json", "report.html"}, "websocket", "--quick")
	var s struct {
		Options struct {
			Notifications int `json:"notifications"`
			Subscribers   int `json:"subscribers"`
		} `json:"options"`
		Reps []struct {
			Paths []struct {
				Path          string `json:"path"`
				Notifications int    `json:"notifications"`
			} `json:"paths"`
			Holdings []struct {
				Kind string `json:"kind"`
				Held int    `json:"held"`
			} `json:"holdings"`
		} `json:"reps"`
		Median struct {
			Stored bool `json:"every_notification_stored"`
		} `json:"median"`
	}
	b := run.summary(t, &s)
	if s.Options.Notifications != 200 || s.Options.Subscribers != 20 || len(s.Reps) != 1 || !s.Median.Stored {
		t.Fatalf("summary: %s", b)
	}
	r := s.Reps[0]
	if len(r.Paths) != 3 || len(r.Holdings) != 2 {
		t.Fatalf("rep: %+v", r)
	}
	for _, h := range r.Holdings {
		if h.Held != 20 {
			t.Errorf("%s: %d held, want 20", h.Kind, h.Held)
		}
	}
	if csv, _ := os.ReadFile(filepath.Join(run.out, "paths.csv")); strings.Count(string(csv), "\n") != 4 {
		t.Errorf("paths.csv: want a header and the three paths:\n%s", csv)
	}
	run.nothingLeft(t)
}
