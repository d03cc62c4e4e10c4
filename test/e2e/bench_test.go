package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// 'iotsafe bench hub --quick' checks the lab's harness: every peer starts and stops,
// every file is written, nothing is left running. Its figures are not looked at.
func TestBenchHubQuick(t *testing.T) {
	needRoot(t) // sshd and dropbear run as root
	for _, tool := range []string{"/usr/sbin/sshd", "dropbear", "dropbearkey", "caddy", "unshare"} {
		needTool(t, tool)
	}
	out := filepath.Join(t.TempDir(), "results")
	cmd := exec.Command(iotsafeBin, "bench", "hub", "--quick", "--out", out, "--ram-n", "5", "--duration", "300ms")
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, text)
	}
	for _, f := range []string{"rps.csv", "ram.csv", "environment.json", "summary.json", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	var s struct {
		RPS     map[string]float64            `json:"rps"`
		RAM     map[string]map[string]float64 `json:"ram_kb"`
		Skipped map[string]string             `json:"skipped"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"iotsafe", "iotsafe_acl_off", "openssh", "dropbear", "https_go", "https_caddy", "https2", "plain"} {
		if _, ok := s.RPS[p]; !ok {
			t.Errorf("summary has no rps.%s (skipped: %q)", p, s.Skipped[p])
		}
	}
	for _, server := range []string{"iotsafe", "openssh", "dropbear"} {
		if _, ok := s.RAM[server]["per_session_idle"]; !ok {
			t.Errorf("summary has no ram_kb.%s.per_session_idle (skipped: %v)", server, s.Skipped)
		}
	}
	var env map[string]any
	b, _ = os.ReadFile(filepath.Join(out, "environment.json"))
	if json.Unmarshal(b, &env) != nil || env["versions"] == nil || env["cores"] == nil {
		t.Fatalf("environment.json: %s", b)
	}
	if html, _ := os.ReadFile(filepath.Join(out, "report.html")); !strings.Contains(string(html), "paper 000") {
		t.Fatal("report.html lacks the paper comparison")
	}
	// No peer survives the run.
	for _, pattern := range []string{"iotsafe-bench-", "iotsafe bench fleet", "iotsafe bench serve"} {
		if pids, _ := exec.Command("pgrep", "-f", pattern).Output(); len(pids) != 0 {
			t.Errorf("processes left matching %q: %s", pattern, pids)
		}
	}
}
