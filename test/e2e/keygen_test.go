package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// --keygen validates the name before it writes, and never replaces or deletes a file it
// did not create.
func TestKeygenWritesNothingOutsideItsFolderAndReplacesNothing(t *testing.T) {
	data, base := t.TempDir(), t.TempDir()
	keys := filepath.Join(base, "keys")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(iotsafeBin, append(args, "--data", data)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("init"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	// A name that climbs out of the folder is refused before anything is created.
	os.WriteFile(filepath.Join(base, "x.pub"), []byte("operator's file\n"), 0o644)
	if out, err := run("device", "add", "../x", "--keygen", keys); err == nil || !strings.Contains(out, "device name") {
		t.Fatalf("device add ../x: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "x.pub")); string(b) != "operator's file\n" {
		t.Fatalf("x.pub outside --keygen was changed: %q", b)
	}
	if _, err := os.Stat(keys); !os.IsNotExist(err) {
		t.Fatalf("the keygen folder was created for a refused name: %v", err)
	}
	// An existing public key is not replaced, and a failed add does not delete it.
	os.MkdirAll(keys, 0o700)
	os.WriteFile(filepath.Join(keys, "cam.pub"), []byte("kept\n"), 0o644)
	if out, err := run("device", "add", "cam", "--keygen", keys); err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("device add over an existing cam.pub: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(keys, "cam.pub")); string(b) != "kept\n" {
		t.Fatalf("cam.pub was replaced: %q", b)
	}
	if _, err := os.Stat(filepath.Join(keys, "cam")); !os.IsNotExist(err) {
		t.Fatal("a private key was left behind by the failed add")
	}
	// A failed enrolment (duplicate name) removes only the pair it created.
	if out, err := run("device", "add", "d1", "--keygen", keys); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	other := filepath.Join(base, "other")
	if out, err := run("device", "add", "d1", "--keygen", other); err == nil {
		t.Fatalf("a second d1 was enrolled:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(other, "d1")); !os.IsNotExist(err) {
		t.Fatal("the refused enrolment's key was left behind")
	}
	if _, err := os.Stat(filepath.Join(keys, "d1")); err != nil {
		t.Fatalf("the enrolled device's key is gone: %v", err)
	}
}
