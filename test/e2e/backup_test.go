package e2e

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A backup taken while the hub serves, put back over its data folder: the hub starts on
// it with its host key (devices' pins hold), its devices and the notifications it had
// stored by then, and a device revoked after the backup stays revoked. A restore while
// the hub runs, or over a data folder without --force, is refused.
func TestBackupAndRestore(t *testing.T) {
	h := startHubWith(t, "", "rest: {listen: '127.0.0.1:0'}\nmetrics: {listen: '127.0.0.1:0'}\n", nil)
	backupMetric := func() string {
		t.Helper()
		resp, err := http.Get("http://" + h.metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return grepLines(string(body), "iotsafe_backup_last_timestamp_seconds ")
	}
	if m := backupMetric(); !strings.Contains(m, "iotsafe_backup_last_timestamp_seconds 0") {
		t.Fatalf("before any backup: %q", m)
	}
	k1 := h.addDevice("dev1")
	k2 := h.addDevice("dev2")
	tok := deviceREST(t, h, "dev1")
	notify(t, h, "dev1", tok, "temperature", map[string]any{"c": 1})

	dir := filepath.Join(t.TempDir(), "backup")
	if out := h.mustCLI("backup", dir); !strings.Contains(out, "registry.db at schema version") || !strings.Contains(out, "telemetry.db at schema version") ||
		!strings.Contains(out, "ready.json") {
		t.Fatalf("backup with the hub running:\n%s", out)
	}
	// The running hub's ready file (the harness keeps it in the data folder) describes
	// that process: a restore must not bring back a stale one.
	if _, err := os.Stat(filepath.Join(dir, "ready.json")); !os.IsNotExist(err) {
		t.Fatalf("the backup holds the running hub's ready file: %v", err)
	}
	if out := h.mustCLI("restore", "--check", dir); !strings.Contains(out, "is a whole backup") {
		t.Fatalf("restore --check:\n%s", out)
	}
	if out := h.mustCLI("status"); !strings.Contains(out, "backup     last ") || !strings.Contains(out, "into "+dir) {
		t.Fatalf("status after a backup:\n%s", out)
	}
	if m := backupMetric(); !strings.Contains(m, "iotsafe_backup_last_timestamp_seconds 1.") {
		t.Fatalf("after a backup: %q", m)
	}
	// After the backup: a notification the restore loses, a revocation it keeps.
	notify(t, h, "dev1", tok, "temperature", map[string]any{"c": 2})
	h.mustCLI("device", "revoke", "dev2", "--reason", "stolen")

	if out, err := h.cli("restore", "--force", dir); err == nil || !strings.Contains(out, "stop it first") {
		t.Fatalf("restore with the hub running: %v\n%s", err, out)
	}
	h.stopKeepingPort()
	if out, err := h.cli("restore", dir); err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("restore over the data folder without --force: %v\n%s", err, out)
	}
	out := h.mustCLI("restore", "--force", dir)
	if !strings.Contains(out, "revoked again: dev2 (revoked after the backup)") || !strings.Contains(out, "what the data folder held is in") {
		t.Fatalf("restore:\n%s", out)
	}
	h.start()
	if ev := h.events("", "restored"); len(ev) != 1 || !strings.Contains(ev[0].Detail, "revoked again: 1") {
		t.Fatalf("the audit log's record of the restore: %+v", ev)
	}

	code, _, got := restCall(t, http.DefaultClient, "GET", "http://"+h.rest+"/api/rest/device/dev1/notification?take=10", deviceREST(t, h, "dev1"), nil)
	if code != 200 || len(got) != 1 || got[0].(map[string]any)["parameters"].(map[string]any)["c"] != float64(1) {
		t.Fatalf("dev1's notifications after the restore: %d %v", code, got)
	}
	if msg, err := exec.Command("ssh", append(sshArgs(h, k2), "dev2@127.0.0.1")...).CombinedOutput(); err == nil || !strings.Contains(string(msg), `the key of device "dev2" is revoked`) {
		t.Fatalf("dev2, revoked after the backup, after the restore: %v\n%s", err, msg)
	}
	// The restored host key is the one dev1's agent pinned.
	a := startAgent(t, h, k1, "--expose", "http="+hostPortOf(deviceApp(t, "ok")))
	a.stderr.wait(t, "session up")
}
