package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// 'iotsafe bench device --quick' runs every scheme over the emulated 802.15.4 link and
// writes its files; this checks the harness (files, schemes, cleanup), never the figures.
func TestBenchDeviceQuick(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"ip", "ssh", "/usr/sbin/sshd"} {
		needTool(t, tool)
	}
	out := filepath.Join(t.TempDir(), "device")
	cmd := exec.Command(iotsafeBin, "bench", "device", "--quick", "--out", out)
	// Every process of this run inherits the tag, so leftovers are found wherever they run.
	tag := fmt.Sprintf("IOTSAFE_TEST_RUN=device-%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd.Env = append(os.Environ(), tag)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bench device: %v\n%s", err, b)
	}
	for _, f := range []string{"device.csv", "environment.json", "summary.json", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	var s struct {
		Efficiency map[string]map[string]float64 `json:"efficiency"`
		Skipped    map[string]string             `json:"skipped"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{"plain", "https12", "https13", "iotsafe", "openssh", "openssh_c"} {
		for _, proto := range []string{"h1", "h2"} {
			if v := s.Efficiency[scheme+"_"+proto]["256"]; v <= 0 || v >= 1 {
				t.Errorf("efficiency %s_%s at 256 B = %v (skipped: %v)", scheme, proto, v, s.Skipped)
			}
		}
	}
	// Only this run's namespaces (named after its pid): other benches may be running.
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), fmt.Sprintf("iotsafe-dev-gw-%d", cmd.Process.Pid)) {
		t.Fatalf("namespaces left behind:\n%s", ns)
	}
	if left := processesWithEnv(tag); len(left) > 0 {
		t.Fatalf("processes left behind: %v", left)
	}
}
