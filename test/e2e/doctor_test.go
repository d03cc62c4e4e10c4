package e2e

import (
	"encoding/json"
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
