package hubfind

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// The files that make a folder a hub's are the ones the hub writes.
func TestHubFilesAreTheHubs(t *testing.T) {
	for _, want := range []string{registry.FileName, admin.SocketName, "hub.yaml"} {
		if !strings.Contains(strings.Join(hubFiles, " "), want) {
			t.Errorf("hubFiles lacks %s", want)
		}
	}
}

// isolate gives the test its own runtime folder and working folder, and no IOTSAFE_DATA.
func isolate(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	t.Setenv(EnvData, "")
	t.Chdir(dir)
	return dir
}

func makeHub(t *testing.T, dir string) string {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, registry.FileName), nil, 0o600)
	abs, _ := filepath.Abs(dir)
	return abs
}

// The documented order: --data, IOTSAFE_DATA, ./iotsafe-data, the running hub.
func TestLocateOrder(t *testing.T) {
	dir := isolate(t)
	if Holds(SystemDefault) {
		t.Skip("this machine runs a hub in " + SystemDefault + ": the last step would find it")
	}
	if _, err := Locate("", false); err == nil || !strings.Contains(err.Error(), "looked for --data, IOTSAFE_DATA, ./iotsafe-data") {
		t.Fatalf("nothing anywhere: %v", err)
	}
	running := makeHub(t, filepath.Join(dir, "elsewhere"))
	withdraw, err := Announce(running)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := Locate("", false); err != nil || f.Dir != running || f.How != "the running hub" {
		t.Fatalf("the running hub: %+v %v", f, err)
	}
	makeHub(t, Default)
	if f, _ := Locate("", false); f.Dir != Default {
		t.Fatalf("./iotsafe-data before the running hub: %+v", f)
	}
	t.Setenv(EnvData, "/from/env")
	if f, _ := Locate("", false); f.Dir != "/from/env" || f.How != EnvData {
		t.Fatalf("IOTSAFE_DATA: %+v", f)
	}
	if f, _ := Locate("given", true); f.Dir != "given" || f.How != "--data" {
		t.Fatalf("--data: %+v", f)
	}
	// Withdrawn: no longer found.
	withdraw()
	if run := Running(); len(run) != 0 {
		t.Fatalf("withdrawn hub still running: %v", run)
	}
}

// Two hubs running and nothing else to choose by: refused, both named.
func TestLocateRefusesTwoRunningHubs(t *testing.T) {
	dir := isolate(t)
	for _, n := range []string{"a", "b"} {
		w, err := Announce(makeHub(t, filepath.Join(dir, n)))
		if err != nil {
			t.Fatal(err)
		}
		defer w()
	}
	_, err := Locate("", false)
	if err == nil || !strings.Contains(err.Error(), "2 hubs are running") || !strings.Contains(err.Error(), filepath.Join(dir, "b")) {
		t.Fatalf("two hubs: %v", err)
	}
}

// An announcement whose process is gone is stale: not found, and removed.
func TestStaleAnnouncementIsDropped(t *testing.T) {
	dir := isolate(t)
	if _, err := Announce(makeHub(t, filepath.Join(dir, "a"))); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(RuntimeDir(), "hub-*.json"))
	if len(files) != 1 {
		t.Fatalf("announcements: %v", files)
	}
	// A process that has exited: its pid, written into the announcement.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(files[0])
	os.WriteFile(files[0], []byte(strings.Replace(string(b), `"pid":`+itoa(os.Getpid()), `"pid":`+itoa(cmd.Process.Pid), 1)), 0o644)
	if run := Running(); len(run) != 0 {
		t.Fatalf("a dead hub counted as running: %v", run)
	}
	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Fatalf("stale announcement kept: %v", err)
	}
}

// A runtime folder others may write into is not trusted: an announcement there could
// point the operator's commands at a folder of someone else's.
func TestRuntimeFolderOthersMayWriteIsRefused(t *testing.T) {
	isolate(t)
	if err := os.MkdirAll(RuntimeDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(RuntimeDir(), 0o777)
	if _, err := Announce(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a folder only this user may write") {
		t.Fatalf("announce into a world-writable folder: %v", err)
	}
	os.WriteFile(filepath.Join(RuntimeDir(), "hub-0.json"), []byte(`{"data":"/","pid":1}`), 0o644)
	if run := Running(); len(run) != 0 {
		t.Fatalf("announcements read from a world-writable folder: %v", run)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
