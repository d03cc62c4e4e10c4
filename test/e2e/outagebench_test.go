package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 'iotsafe bench outage --quick' checks the outage lab's harness: real agents on a real
// hub, the hub killed and restarted on the same data folder and address, every device
// back, every output file written, and no process left. Times are not checked.
func TestBenchOutageQuick(t *testing.T) {
	run := runBench(t, []string{"back.csv", "attempts.csv", "environment.json", "summary.json", "report.html"}, "outage", "--quick", "--reps", "2")
	out := run.out
	var s struct {
		Options struct {
			Devices int `json:"devices"`
		} `json:"options"`
		First struct {
			Missing int `json:"missing"`
		} `json:"first_connect_ms"`
		Reps []struct {
			Back struct {
				Missing int `json:"missing"`
			} `json:"back_ms"`
			Bins map[string]int `json:"attempts_by_second"`
		} `json:"reps"`
	}
	b := run.summary(t, &s)
	if s.Options.Devices != 5 || s.First.Missing != 0 || len(s.Reps) != 2 {
		t.Fatalf("summary: %s", b)
	}
	for i, r := range s.Reps {
		connects := 0
		for _, n := range r.Bins {
			connects += n
		}
		// Every device came back, so each connected at least once after the kill.
		if r.Back.Missing != 0 || connects < s.Options.Devices {
			t.Errorf("outage %d: %d devices not back, %d connects: %s", i+1, r.Back.Missing, connects, b)
		}
	}
	if back, _ := os.ReadFile(filepath.Join(out, "back.csv")); strings.Count(string(back), "\n") != 1+3*5 || strings.Contains(string(back), "missing") {
		t.Errorf("back.csv: want a header and 5 devices for the start and each outage:\n%s", back)
	}
	run.nothingLeft(t)
}

// 'iotsafe bench churn --quick' checks the churn lab's harness: real agent processes on
// a real hub, some SIGKILLed and restarted each round while requests go through, every
// output file written, the hub alive at the end, and no process left. Times and
// footprints are not checked.
func TestBenchChurnQuick(t *testing.T) {
	run := runBench(t, []string{"kills.csv", "environment.json", "summary.json", "report.html"}, "churn", "--quick")
	var s struct {
		Options struct {
			Devices int `json:"devices"`
		} `json:"options"`
		HubAlive bool `json:"hub_alive"`
		Kills    int  `json:"kills"`
		Back     struct {
			Missing int `json:"missing"`
		} `json:"back_ms"`
		Start struct {
			Files int `json:"open_files"`
		} `json:"hub_start"`
		End struct {
			Files int `json:"open_files"`
		} `json:"hub_end"`
	}
	b := run.summary(t, &s)
	if s.Options.Devices != 5 || !s.HubAlive || s.Kills == 0 || s.Back.Missing != 0 || s.Start.Files == 0 || s.End.Files == 0 {
		t.Fatalf("summary: %s", b)
	}
	if kills, _ := os.ReadFile(filepath.Join(run.out, "kills.csv")); strings.Count(string(kills), "\n") != 1+s.Kills || strings.Contains(string(kills), "missing") {
		t.Errorf("kills.csv: want a header and a row per kill:\n%s", kills)
	}
	run.nothingLeft(t)
}
