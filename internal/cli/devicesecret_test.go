package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Replacing a secret is 'rotate', never a bare name; 'show' shows what the hub can: the
// SOAP key (kept), not the telemetry secret (kept hashed), and says so (issue 52.5).
func TestDeviceSecretRotateAndShow(t *testing.T) {
	run := cliOn(filepath.Join(t.TempDir(), "hub"))
	run("init")
	if code, _, e := run("device", "add", "dev1", "--keygen", t.TempDir()); code != 0 {
		t.Fatal(e)
	}
	// The old form replaced the secret; now it changes nothing and says what it became.
	if code, _, e := run("device", "secret", "dev1"); code != 1 || !strings.Contains(e, "'iotsafe device secret rotate dev1'") {
		t.Fatalf("device secret NAME: %d %s", code, e)
	}
	if code, _, e := run("device", "secret", "show", "dev1"); code != 1 || !strings.Contains(e, "dev1 has no telemetry secret") {
		t.Fatalf("show before any: %d %s", code, e)
	}
	code, secret, e := run("device", "secret", "rotate", "dev1")
	if code != 0 || len(strings.TrimSpace(secret)) < 20 || !strings.Contains(e, "the old one no longer works") {
		t.Fatalf("rotate: %d %q %s", code, secret, e)
	}
	if code, out, e := run("device", "secret", "show", "dev1"); code != 1 || strings.Contains(out+e, strings.TrimSpace(secret)) || !strings.Contains(e, "keeps only its SHA-256 hash and cannot show it") {
		t.Fatalf("show: %d %s %s", code, out, e)
	}
	// --out: mode 0600, nothing on standard output.
	file := filepath.Join(t.TempDir(), "dev1.soapkey")
	if code, out, e := run("device", "soap-key", "rotate", "dev1", "--out", file); code != 0 || out != "" || !strings.Contains(e, "written to "+file+" (mode 0600)") {
		t.Fatalf("soap-key rotate --out: %d %q %s", code, out, e)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v", fi, err)
	}
	key, _ := os.ReadFile(file)
	if code, out, _ := run("device", "soap-key", "show", "dev1"); code != 0 || out != string(key) {
		t.Fatalf("soap-key show: %d %q, the file holds %q", code, out, key)
	}
	// A folder --out cannot write into: refused before the old key is replaced.
	if code, _, e := run("device", "soap-key", "rotate", "dev1", "--out", "/nonexistent/dir/k"); code != 1 || !strings.Contains(e, "--out") {
		t.Fatalf("--out into a missing folder: %d %s", code, e)
	}
	if _, out, _ := run("device", "soap-key", "show", "dev1"); out != string(key) {
		t.Fatalf("a refused rotate replaced the key: %q", out)
	}
	if code, _, e := run("device", "secret", "rotate", "nodev"); code != 1 || !strings.Contains(e, "nodev") {
		t.Fatalf("rotate of an unknown device: %d %s", code, e)
	}
}
