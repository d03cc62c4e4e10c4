package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With the hub running and no device online, device list says what each device is doing
// (it used to say "unknown (hub not running)").
func TestDeviceListWithNoDeviceOnline(t *testing.T) {
	h := startHub(t, "", "")
	h.addDevice("dev1")
	out := h.mustCLI("device", "list")
	if strings.Contains(out, "hub not running") || !strings.Contains(out, "never connected") {
		t.Fatalf("device list with the hub running and nobody online:\n%s", out)
	}
	h.stop()
	if out := h.mustCLI("device", "list"); !strings.Contains(out, "hub not running") {
		t.Fatalf("device list with the hub stopped:\n%s", out)
	}
}

// An agent whose key the hub revoked stops retrying every minute: it says so once and
// waits (an hour by default) or until its key file changes.
func TestRevokedAgentWaits(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	h.mustCLI("device", "revoke", "dev1", "--reason", "stolen")
	a := startAgent(t, h, key, "--expose", "http=127.0.0.1:1")
	a.stderr.wait(t, "the hub says this device's key is revoked; waiting for a new key file or the retry time", "event", "key_revoked", "retry_in", "1h0m0s")
	if n := len(h.events("dev1", "auth_refused")); n < 1 {
		t.Fatalf("auth_refused events: %d", n)
	}
}

// A hub killed with SIGKILL leaves no gap in the audit log: the next start closes the
// sessions it left open and says the previous run ended without a clean stop.
func TestAuditAfterAHubKill(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "x")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	h.cmd.Process.Kill()
	h.cmd.Wait()
	h.start()
	h.log.wait(t, "the previous run ended without a clean stop (crash or kill)", "event", "hub_crash_recovered")
	var closed bool
	for _, e := range h.events("dev1", "session_close") {
		closed = closed || strings.Contains(e.Detail, "without a clean stop")
	}
	if !closed {
		t.Fatalf("no session_close for the session the killed hub held: %+v", h.events("dev1", "session_close"))
	}
	if ev := h.events("", "hub_started"); len(ev) != 2 || !strings.Contains(ev[1].Detail, "without a clean stop") {
		t.Fatalf("hub_started events: %+v", ev)
	}
}

// Below audit.min_free_mib new enrolments are refused with the reason, while revocation
// keeps working (a threshold above the disk's size stands in for a nearly full disk).
func TestEnrolmentRefusedWhenTheDiskIsNearlyFull(t *testing.T) {
	h := startHub(t, "", "")
	h.addDevice("dev1")
	h.stop()
	cfg, _ := os.ReadFile(h.config)
	os.WriteFile(h.config, append(cfg, []byte("audit: {min_free_mib: 100000000}\n")...), 0o600)
	h.start()
	h.log.wait(t, "the data folder is nearly full: enrolments are refused", "event", "low_space")
	if out, err := h.cli("device", "add", "dev2", "--keygen", filepath.Join(h.data, "keys")); err == nil || !strings.Contains(out, "nearly full") {
		t.Fatalf("enrolment with the disk nearly full: %v\n%s", err, out)
	}
	if out := h.mustCLI("device", "revoke", "dev1"); !strings.Contains(out, "revoked") {
		t.Fatalf("revoke with the disk nearly full: %s", out)
	}
}

// iotsafe status: the running hub's listeners and devices, exit 0; no hub, exit 1 with
// the reason, so a monitoring check can run it as is.
func TestStatus(t *testing.T) {
	h := startHub(t, "", "")
	h.addDevice("dev1")
	h.addDevice("dev2")
	h.mustCLI("device", "revoke", "dev2", "--reason", "lost")
	out := h.mustCLI("status")
	for _, want := range []string{"hub        running, pid", "registry   ok, schema version ", "ssh " + h.addr, "2 enrolled, 0 online, 1 revoked", "MiB free"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	h.stop()
	// The hub's ready file (the harness reads it at start) goes with a clean stop.
	if _, err := os.Stat(filepath.Join(h.data, "ready.json")); !os.IsNotExist(err) {
		t.Fatalf("ready file after a clean stop: %v", err)
	}
	out, err := h.cli("status")
	if err == nil || !strings.Contains(out, "not running") || !strings.Contains(out, "2 enrolled, 1 revoked") {
		t.Fatalf("status with the hub stopped: err=%v\n%s", err, out)
	}
	nowhere := filepath.Join(t.TempDir(), "nowhere")
	out2, err := h.cliCommand("status", "--data", nowhere).CombinedOutput()
	if err == nil || !strings.Contains(string(out2), "no registry in") {
		t.Fatalf("status of an empty data folder: err=%v\n%s", err, out2)
	}
	if _, err := os.Stat(nowhere); err == nil {
		t.Fatal("status created a data folder")
	}
}
