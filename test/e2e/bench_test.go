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
	r := runBench(t, []string{"rps.csv", "bulk.csv", "ram.csv", "sweeps.csv", "environment.json", "summary.json", "report.html"},
		"hub", "--quick", "--ram-n", "5", "--duration", "300ms", "--active", "5", "--inactive-k", "0,5", "--ps-total", "10", "--ps-sessions", "1,10")
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
	r.summary(t, &s)
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
	b, _ := os.ReadFile(filepath.Join(r.out, "environment.json"))
	if json.Unmarshal(b, &env) != nil || env["versions"] == nil || env["cores"] == nil {
		t.Fatalf("environment.json: %s", b)
	}
	if html, _ := os.ReadFile(filepath.Join(r.out, "report.html")); !strings.Contains(string(html), "paper 000") {
		t.Fatal("report.html lacks the paper comparison")
	}
	r.nothingLeft(t) // no peer survives the run
}

// benchRun is one 'iotsafe bench' run of a test.
type benchRun struct {
	out  string // its results folder
	text []byte // what it printed
	tag  string // in the environment of each of its processes
	pid  int    // the lab's: its namespaces are named after it
}

// runBench runs 'iotsafe bench ARGS --out DIR'. Every process of the run inherits a tag
// in its environment, so leftovers are found even after they were reparented, and
// processes of other runs on the machine are never mistaken. The test fails if the run
// does or one of files is missing or empty in its results folder.
func runBench(t *testing.T, files []string, args ...string) benchRun {
	t.Helper()
	r := benchRun{out: filepath.Join(t.TempDir(), "results"), tag: fmt.Sprintf("IOTSAFE_TEST_RUN=%s-%d-%d", args[0], os.Getpid(), time.Now().UnixNano())}
	cmd := exec.Command(iotsafeBin, append(append([]string{"bench"}, args...), "--out", r.out)...)
	cmd.Env = append(os.Environ(), r.tag)
	text, err := cmd.CombinedOutput()
	r.text = text
	if err != nil {
		t.Fatalf("bench %s: %v\n%s", strings.Join(args, " "), err, text)
	}
	r.pid = cmd.Process.Pid
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(r.out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	return r
}

// summary decodes the run's summary.json into v and returns its text.
func (r benchRun) summary(t *testing.T, v any) []byte {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(r.out, "summary.json"))
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("summary.json: %v\n%s", err, b)
	}
	return b
}

// nothingLeft fails the test if a process of the run, or a namespace of its lab whose
// name starts with nsPrefix (iotsafe-ROLE-PID), is still there.
func (r benchRun) nothingLeft(t *testing.T, nsPrefix ...string) {
	t.Helper()
	if left := processesWithEnv(r.tag); len(left) > 0 {
		t.Errorf("processes of the run left behind: %v", left)
	}
	ns, _ := exec.Command("ip", "netns", "list").Output()
	for _, p := range nsPrefix {
		if strings.Contains(string(ns), fmt.Sprintf("%s-%d", p, r.pid)) {
			t.Errorf("namespaces left behind:\n%s", ns)
		}
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
