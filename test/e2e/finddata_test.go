package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// An operator in another folder, with no --data and no IOTSAFE_DATA, reaches the hub
// that is running (issue 52.1): it announced its folder in the runtime folder. A "not
// found" names the hub it looked in. With the hub stopped, nothing is found and the
// command refuses, saying what it tried, and creates nothing.
func TestAdminCommandsFindTheRunningHub(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run") // this test's own: other tests' hubs announce elsewhere
	h := startHubWith(t, "", "", func(h *hubProc) { h.env = []string{"XDG_RUNTIME_DIR=" + run} })
	elsewhere := t.TempDir()
	cli := func(args ...string) (string, int) {
		c := exec.Command(iotsafeBin, args...)
		c.Dir = elsewhere
		c.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+run)
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := cli("device", "add", "dev1", "--keygen", t.TempDir()); code != 0 || !strings.Contains(out, "enrolled dev1") {
		t.Fatalf("device add with no --data: %d %s", code, out)
	}
	if out := h.mustCLI("device", "list"); !strings.Contains(out, "dev1") {
		t.Fatalf("the device went elsewhere than the running hub:\n%s", out)
	}
	if out, code := cli("status"); code != 0 || !strings.Contains(out, h.data) {
		t.Fatalf("status names the hub's folder: %d %s", code, out)
	}
	if out, code := cli("device", "revoke", "nosuch"); code != 1 || !strings.Contains(out, "in the hub at "+h.data+", found by the running hub") {
		t.Fatalf("a revoke of a device the hub does not know: %d %s", code, out)
	}
	h.stop()
	out, code := cli("device", "list")
	if code != 1 || !strings.Contains(out, "no hub found: looked for --data, IOTSAFE_DATA, ./iotsafe-data, a running hub") {
		t.Fatalf("no hub running: %d %s", code, out)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("a command made %v in the operator's folder", entries)
	}
	if entries, _ := os.ReadDir(filepath.Join(run, "iotsafe")); len(entries) != 0 {
		t.Fatalf("the stopped hub's announcement stays: %v", entries)
	}
}
