package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// onSmallDisk puts the hub's data folder on a 16 MiB tmpfs in a private mount namespace
// held by a sleeping process; the hub and the CLI run in that namespace, the host's
// mounts are untouched. It returns the path through which the test reaches the folder.
func onSmallDisk(t *testing.T) (setup func(*hubProc), inNS func(string) string) {
	var pid int
	setup = func(h *hubProc) {
		// The configuration the harness wrote goes onto the tmpfs with it.
		script := fmt.Sprintf(`set -e; d=%q; s=$(mktemp -d); cp -a "$d/." "$s/"; mount -t tmpfs -o size=16m,mode=0700 iotsafe-e2e "$d"; cp -a "$s/." "$d/"; rm -rf "$s"; echo ready; exec sleep infinity`, h.data)
		ns := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
		out, err := ns.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		ns.Stderr = os.Stderr
		if err := ns.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Process.Kill(); ns.Wait() }) // the namespace and its tmpfs go with it
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			t.Fatalf("mount namespace with a small data folder: %q", line)
		}
		pid = ns.Process.Pid
		enter := []string{"nsenter", "-t", strconv.Itoa(pid), "-m", "--"}
		h.wrap, h.cliWrap = enter, enter
	}
	inNS = func(p string) string { return filepath.Join(fmt.Sprintf("/proc/%d/root", pid), p) }
	return setup, inNS
}

// fill writes a file until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<16)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			return
		}
	}
}

// With the data folder's disk full the registry cannot write, yet a revocation takes
// effect at once: the session is closed, the key is refused, and the hub says it holds
// the revocation in memory; violations still count toward on_violation. When space
// returns, everything held is written with the time it happened.
func TestFullDiskKeepsRevocationAndViolations(t *testing.T) {
	needRoot(t)
	setup, inNS := onSmallDisk(t)
	// Enrolments stop below 1 MiB free here (the default, 64 MiB, exceeds this disk).
	h := startHubWith(t, "", "audit: {min_free_mib: 1}\n", setup)
	keys := t.TempDir() // outside the tmpfs: the clients run in the host's namespace
	h.mustCLI("device", "add", "dev1", "--keygen", keys)
	prof := writeProfile(t, t.TempDir(), "name: strict\nreverse: {http: 80}\non_violation: {action: revoke, after: 3}\n")
	h.mustCLI("device", "add", "dev2", "--keygen", keys, "--profile", prof)
	key1, key2 := filepath.Join(keys, "dev1"), filepath.Join(keys, "dev2")
	app := deviceApp(t, "ok")
	p := startProc(t, "ssh", append(sshArgs(h, key1), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ssh client of dev1:\n%s", p.stderr.text())
		}
	})
	h.log.wait(t, "reverse forward open", "device", "dev1")
	sock := h.socket("dev1", "http")
	mustGet(t, sock, "ok")

	filler := inNS(filepath.Join(h.data, "filler"))
	fill(t, filler)

	out := h.mustCLI("device", "revoke", "dev1", "--reason", "stolen")
	if !strings.Contains(out, "held in the hub's memory") || !strings.Contains(out, "could not be written") || !strings.Contains(out, "closed 1 live session") {
		t.Fatalf("revoke on a full disk:\n%s", out)
	}
	h.log.waitText(t, "the registry cannot write")
	h.log.wait(t, "session closed", "device", "dev1", "why", "key revoked")
	p.waitExit(t)
	if _, err := httpGet(t, sock); err == nil {
		t.Fatal("protected socket still serves after revoke")
	}
	again := exec.Command("ssh", append(sshArgs(h, key1), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	if msg, err := again.CombinedOutput(); err == nil || !strings.Contains(string(msg), `the key of device "dev1" is revoked`) {
		t.Fatalf("revoked key on a full disk: err=%v, client saw:\n%s", err, msg)
	}
	show := h.mustCLI("device", "show", "dev1")
	if !strings.Contains(show, "held in the hub's memory") || !strings.Contains(show, "hub is degraded") || !strings.Contains(show, "stolen") {
		t.Fatalf("device show on a degraded hub:\n%s", show)
	}
	// iotsafe status says it and exits non-zero, for a monitoring check; the full disk
	// is below audit.min_free_mib too.
	if st, err := h.cli("status"); err == nil || !strings.Contains(st, "DEGRADED") || !strings.Contains(st, "1 revocation(s) held") ||
		!strings.Contains(st, "LOW") || !strings.Contains(st, "the hub is degraded") {
		t.Fatalf("status on a degraded hub: err=%v\n%s", err, st)
	}

	// dev2's profile revokes it at its third violation: forwards of an alias it does not
	// have are violations, counted in memory now.
	for i := range 3 {
		v := exec.Command("ssh", append(sshArgs(h, key2), "-R", fmt.Sprintf("nosuch%d:80:%s", i, hostPortOf(app)), "dev2@127.0.0.1")...)
		v.CombinedOutput() // refused: ExitOnForwardFailure ends it
	}
	h.log.wait(t, "device revoked", "device", "dev2")
	if msg, err := exec.Command("ssh", append(sshArgs(h, key2), "dev2@127.0.0.1")...).CombinedOutput(); err == nil || !strings.Contains(string(msg), "is revoked") {
		t.Fatalf("dev2 after three violations on a full disk: err=%v\n%s", err, msg)
	}

	// Space returns: what was held is written.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h.log.waitText(t, "the registry writes again")
	for _, name := range []string{"dev1", "dev2"} {
		if d := h.device(name); d.Revoked == nil {
			t.Fatalf("%s: revocation not written after the disk recovered", name)
		}
	}
	if d := h.device("dev2"); d.Violations < 3 {
		t.Fatalf("dev2: %d violations written, want at least 3", d.Violations)
	}
	if ev := h.events("dev1", "auth_refused"); len(ev) == 0 {
		t.Fatal("the refusal held in memory was not written to the audit log")
	}
	// Sessions that began or ended meanwhile are in the audit log too: dev1's end (its
	// start was written before the disk filled) and dev2's three sessions.
	if ev := h.events("dev1", "session_close"); len(ev) != 1 {
		t.Fatalf("dev1's session end held in memory: %d session_close events written, want 1", len(ev))
	}
	if opened, closed := h.events("dev2", "session_open"), h.events("dev2", "session_close"); len(opened) != 3 || len(closed) != 3 {
		t.Fatalf("dev2's sessions held in memory: %d opens and %d ends written, want 3 each", len(opened), len(closed))
	}
	if show := h.mustCLI("device", "show", "dev1"); strings.Contains(show, "degraded") || !strings.Contains(show, "stolen") {
		t.Fatalf("device show after recovery:\n%s", show)
	}
	if st, err := h.cli("status"); err != nil || !strings.Contains(st, "registry   ok") {
		t.Fatalf("status after recovery: err=%v\n%s", err, st)
	}
}
