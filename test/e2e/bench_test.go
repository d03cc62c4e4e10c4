package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// 'iotsafe bench hub --quick' checks the lab's harness: every peer starts and stops,
// every file is written, nothing is left running. Its figures are not looked at.
func TestBenchHubQuick(t *testing.T) {
	needRoot(t) // sshd and dropbear run as root
	for _, tool := range []string{"/usr/sbin/sshd", "dropbear", "dropbearkey", "caddy", "unshare"} {
		needTool(t, tool)
	}
	out := filepath.Join(t.TempDir(), "results")
	cmd := exec.Command(iotsafeBin, "bench", "hub", "--quick", "--out", out, "--ram-n", "5", "--duration", "300ms",
		"--active", "5", "--inactive-k", "0,5", "--ps-total", "10", "--ps-sessions", "1,10")
	// Every process of this run inherits the tag, so leftovers are found even after they
	// were reparented, and processes of other runs on the machine are never mistaken.
	tag := fmt.Sprintf("IOTSAFE_TEST_RUN=%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd.Env = append(os.Environ(), tag)
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, text)
	}
	for _, f := range []string{"rps.csv", "bulk.csv", "ram.csv", "sweeps.csv", "environment.json", "summary.json", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	var s struct {
		RPS      map[string]float64            `json:"rps"`
		RAM      map[string]map[string]float64 `json:"ram_kb"`
		Inactive map[string]map[string]float64 `json:"inactive_penalty"`
		PS       map[string]map[string]float64 `json:"ps_normalized"`
		Skipped  map[string]string             `json:"skipped"`
		Bulk     struct {
			MBps   map[string]float64 `json:"mb_per_s"`
			Errors map[string]string  `json:"errors"`
		} `json:"bulk"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"iotsafe", "iotsafe_acl_off", "openssh", "dropbear", "https_go", "https_caddy", "https2", "plain", "frontdoor", "frontdoor_ka", "https_go_ka"} {
		if _, ok := s.RPS[p]; !ok {
			t.Errorf("summary has no rps.%s (skipped: %q)", p, s.Skipped[p])
		}
	}
	for _, p := range []string{"plain", "iotsafe", "iotsafe_channels", "openssh", "dropbear"} {
		if _, ok := s.Bulk.MBps[p]; !ok {
			t.Errorf("summary has no bulk.mb_per_s.%s (error: %q, skipped: %q)", p, s.Bulk.Errors[p], s.Skipped[p])
		}
	}
	for _, server := range []string{"iotsafe", "openssh", "dropbear"} {
		if _, ok := s.RAM[server]["per_session_idle"]; !ok {
			t.Errorf("summary has no ram_kb.%s.per_session_idle (skipped: %v)", server, s.Skipped)
		}
	}
	for _, server := range []string{"iotsafe", "openssh"} {
		if _, ok := s.Inactive[server]["5"]; !ok {
			t.Errorf("summary has no inactive_penalty.%s.5 (skipped: %v)", server, s.Skipped)
		}
		if len(s.PS[server]) != 2 {
			t.Errorf("summary has no ps_normalized.%s for S=1,10 (skipped: %v)", server, s.Skipped)
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
	if left := processesWithEnv(tag); len(left) > 0 {
		t.Errorf("processes of the run left behind: %v", left)
	}
}

// processesWithEnv lists the command lines of processes whose environment holds kv.
func processesWithEnv(kv string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(kv+"\x00")) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}
