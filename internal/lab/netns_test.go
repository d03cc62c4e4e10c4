package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// A namespace left by a lab run that was killed is removed by the next run; one of a
// process that still runs, and one that is not the lab's, are left alone. Needs root
// (ip netns); the test's namespaces are removed whatever happens.
func TestSweepStaleNetns(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("iotsafe-bench-%d", gone.Process.Pid) // reaped: that PID runs nothing
	live := fmt.Sprintf("iotsafe-link-gw-%d", os.Getpid())
	other := fmt.Sprintf("iotsafe-prod-%d", gone.Process.Pid)
	for _, ns := range []string{dead, live, other} {
		if err := AddNetns(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { DelNetns(ns) })
	}
	removed, err := SweepStaleNetns()
	if err != nil {
		t.Fatal(err)
	}
	// Other stale namespaces of killed runs on this machine may go too.
	if !slices.Contains(removed, dead) || slices.Contains(removed, live) || slices.Contains(removed, other) {
		t.Fatalf("removed %v, want %s and neither %s nor %s", removed, dead, live, other)
	}
	for ns, want := range map[string]bool{dead: false, live: true, other: true} {
		_, err := os.Stat("/var/run/netns/" + ns)
		if got := err == nil; got != want {
			t.Errorf("namespace %s exists: %v, want %v", ns, got, want)
		}
	}
}

// A process that has exited but is not reaped yet (a zombie) does not run; one that
// runs does.
func TestProcessRuns(t *testing.T) {
	if !processRuns(os.Getpid()) {
		t.Fatal("this process does not run")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the exit without reaping: WNOWAIT leaves the zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if processRuns(cmd.Process.Pid) {
		t.Fatal("a zombie counts as running")
	}
	cmd.Wait()
	if processRuns(cmd.Process.Pid) {
		t.Fatal("a reaped process counts as running")
	}
}

// Scratch folders of killed runs are removed; this run's, a symbolic link and other
// names are left alone.
func TestSweepStaleScratch(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mine, err := NewScratch()
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, fmt.Sprintf("iotsafe-bench-%d-123", gone.Process.Pid))
	os.MkdirAll(filepath.Join(dead, "keys"), 0o700)
	os.WriteFile(filepath.Join(dead, "keys", "k"), []byte("x"), 0o600)
	target := t.TempDir()
	link := filepath.Join(tmp, fmt.Sprintf("iotsafe-bench-%d-456", gone.Process.Pid))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, fmt.Sprintf("iotsafe-bench-%d", gone.Process.Pid))
	os.Mkdir(other, 0o700)

	removed, err := SweepStaleScratch()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dead}) {
		t.Fatalf("removed %v, want [%s]", removed, dead)
	}
	for path, want := range map[string]bool{dead: false, mine: true, link: true, target: true, other: true} {
		_, err := os.Lstat(path)
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v", path, got, want)
		}
	}
}
