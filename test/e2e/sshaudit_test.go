package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/pyenv"
)

// sshAudit finds the ssh-audit that scripts/setup.sh installs in the project's venv.
func sshAudit(t *testing.T) string {
	t.Helper()
	return venvTool(t, "ssh-audit")
}

// venvTool finds a program in the project's Python venv (scripts/setup.sh fills it).
func venvTool(t *testing.T, name string) string {
	t.Helper()
	p, err := pyenv.Tool(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type auditAlgo struct {
	Algorithm string              `json:"algorithm"`
	Notes     map[string][]string `json:"notes"`
}

type auditReport struct {
	AdditionalNotes []string    `json:"additional_notes"`
	CVEs            []any       `json:"cves"`
	Kex             []auditAlgo `json:"kex"`
	Key             []auditAlgo `json:"key"`
	Enc             []auditAlgo `json:"enc"`
	MAC             []auditAlgo `json:"mac"`
}

// runAudit audits the hub's SSH port and returns ssh-audit's JSON report.
func runAudit(t *testing.T, h *hubProc) auditReport {
	t.Helper()
	out, err := exec.Command(sshAudit(t), "-j", "-p", h.port, "127.0.0.1").Output()
	// ssh-audit exits 2 when it has warnings, 3 on failures: the report says which.
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 3) {
		t.Fatalf("ssh-audit: %v\n%s", err, out)
	}
	var r auditReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("ssh-audit output: %v\n%s", err, out)
	}
	return r
}

// A default hub passes ssh-audit 3.x: no failure, no DHEat (connection-rate) note, and
// warnings only for what docs/security-model.md explains (curve25519 is not post-quantum;
// it stays for OpenSSH 9.2 and Dropbear clients).
func TestSSHAuditDefaultHub(t *testing.T) {
	h := startHub(t, "", "")
	r := runAudit(t, h)
	if len(r.CVEs) > 0 {
		t.Errorf("CVEs reported: %v", r.CVEs)
	}
	explained := map[string]bool{"curve25519-sha256": true, "curve25519-sha256@libssh.org": true}
	for _, group := range [][]auditAlgo{r.Kex, r.Key, r.Enc, r.MAC} {
		for _, a := range group {
			if f := a.Notes["fail"]; len(f) > 0 {
				t.Errorf("%s: fail %v", a.Algorithm, f)
			}
			if w := a.Notes["warn"]; len(w) > 0 && !explained[a.Algorithm] {
				t.Errorf("%s: warning not explained in docs/security-model.md: %v", a.Algorithm, w)
			}
		}
	}
	for _, n := range r.AdditionalNotes {
		if strings.Contains(n, "DHEat") {
			t.Errorf("connection throttling: %s", n)
		}
	}
	// A device from the audited address still gets in right after the audit (it waits
	// at most until the audit's failed handshakes are forgiven).
	needTool(t, "ssh")
	key := h.addDevice("dev1")
	app := deviceApp(t, "after the audit")
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	mustGet(t, h.socket("dev1", "http"), "after the audit")
}

// The same audit finds the missing throttling when an operator turns it off in effect:
// the test above would catch a regression, not a blind tool.
func TestSSHAuditSeesUnthrottledHub(t *testing.T) {
	h := startHub(t, "", "  per_source: {startups: 100000, failure_rate: 100000}\n")
	r := runAudit(t, h)
	for _, n := range r.AdditionalNotes {
		if strings.Contains(n, "DHEat") {
			return
		}
	}
	t.Fatalf("ssh-audit did not report the unthrottled hub: %v", r.AdditionalNotes)
}
