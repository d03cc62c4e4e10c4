package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// 'iotsafe doctor' checks what the hints depend on and says what to fix (issue 52.11):
// on a running hub with a front door whose domain cannot resolve (.invalid, RFC 6761)
// the names warn with the --resolve fix while the certificates, fetched by name from the
// listener, are trusted; the kernel layer, off in this test, warns; nothing fails. With
// the hub stopped the hub check fails, with how to start it, and the exit status is 1.
func TestDoctor(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: doctor.invalid}\n")
	out := h.mustCLI("doctor")
	for _, want := range []string{"OK    hub", "OK    registry", "OK    listener ssh", "greets: SSH-2.0-", "OK    listener frontdoor",
		"WARN  name doctor.invalid", "curl --resolve doctor.invalid:", "OK    certificate doctor.invalid", "OK    certificate dev1.doctor.invalid",
		"WARN  access", "access.kernel is off", "OK    disk"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor lacks %q:\n%s", want, out)
		}
	}
	var checks []struct{ Check, Status, Detail, Fix string }
	if err := json.Unmarshal([]byte(h.mustCLI("doctor", "-o", "json")), &checks); err != nil || len(checks) < 8 {
		t.Fatalf("doctor -o json: %v %+v", err, checks)
	}
	h.stop()
	out, err := h.cli("doctor")
	if err == nil || !strings.Contains(out, "FAIL  hub") || !strings.Contains(out, "fix: start it") || !strings.Contains(out, "doctor: 1 check(s) failed: hub") {
		t.Fatalf("doctor with the hub stopped: %v\n%s", err, out)
	}
}

// The hub runs with the smallest starting goroutine stacks (issue 54's memory per
// connection): it executed itself again with GODEBUG=adaptivestackstart=0, keeping its
// process id, so what started it (a service manager, this test) still holds it.
func TestHubStartsGoroutinesSmall(t *testing.T) {
	h := startHub(t, "", "")
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", h.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "GODEBUG=") || !strings.Contains(string(env), "adaptivestackstart=0") {
		t.Fatalf("the hub's environment has no GODEBUG=adaptivestackstart=0:\n%s", strings.ReplaceAll(string(env), "\x00", "\n"))
	}
	if out := h.mustCLI("status"); !strings.Contains(out, fmt.Sprintf("pid %d", h.cmd.Process.Pid)) {
		t.Fatalf("the hub answering is not the process started:\n%s", out)
	}
}
