package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run processes under other uids (CI runs as root)")
	}
}

// reachable makes dir and its parents traversable by other uids (t.TempDir is 0700).
func reachable(t *testing.T, dir string) {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o011 != 0o011 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
}

// As runs a command under uid/gid with supplementary groups and returns its output.
func as(t *testing.T, uid, gid uint32, groups []uint32, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// inUserDB wraps the hub in a private mount namespace whose /etc/passwd and /etc/group
// are test files: the hub sees these users and groups; the host's database is untouched.
func inUserDB(passwd, group string) func(*hubProc) {
	return func(h *hubProc) {
		p, g := filepath.Join(h.data, "passwd"), filepath.Join(h.data, "group")
		os.WriteFile(p, []byte(passwd), 0o644)
		os.WriteFile(g, []byte(group), 0o644)
		h.wrap = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			fmt.Sprintf(`mount --bind %s /etc/passwd && mount --bind %s /etc/group && exec "$0" "$@"`, p, g)}
	}
}

const (
	testPasswd = "root:x:0:0:root:/root:/bin/sh\nplatform:x:1001:1001::/:/bin/false\nops:x:1002:1002::/:/bin/false\nstranger:x:1003:1003::/:/bin/false\n"
	testGroup  = "root:x:0:\nplatform:x:1001:\nops:x:1002:\nstranger:x:1003:\noperators:x:2000:ops\n"
)

// Permissions decide who reaches a device service: a granted user and a granted group
// get through, another user is refused by the resolver and by the hub's user-space
// check on the socket itself, and ungrant takes effect at once.
func TestAccessControlUserSpace(t *testing.T) { forEachListenerMode(t, testAccessControlUserSpace) }

// forEachListenerMode runs an access test with a listener per protected socket (the
// default) and with shared listeners (pool.shared_listeners: one per port); extra is
// the hub's configuration for the mode.
func forEachListenerMode(t *testing.T, test func(t *testing.T, extra string)) {
	t.Run("per-socket", func(t *testing.T) { test(t, "") })
	t.Run("shared", func(t *testing.T) {
		// Its own ports: a shared listener takes its port on every local address.
		_, port, _ := strings.Cut(freePort(t), ":")
		test(t, fmt.Sprintf("pool:\n  shared_listeners: true\n  port_base: %s\n", port))
	})
}

func testAccessControlUserSpace(t *testing.T, extra string) {
	needRoot(t)
	h := startHubWith(t, "", extra, inUserDB(testPasswd, testGroup))
	reachable(t, h.data)
	key := h.addDevice("dev42", "--group", "sensors")
	app := deviceApp(t, "sensor 42")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	sock := h.socket("dev42", "http")
	curl := func(uid, gid uint32, groups ...uint32) (string, error) {
		return as(t, uid, gid, groups, "curl", "-sS", "--fail", "--max-time", "20", "http://"+sock+"/")
	}
	resolve := func(uid, gid uint32, groups ...uint32) (string, error) {
		return as(t, uid, gid, groups, iotsafeBin, "resolve", "dev42", "http", "--data", h.data)
	}

	// Nobody but root may reach it before a grant.
	if out, err := curl(1001, 1001); err == nil {
		t.Fatalf("ungranted uid reached the device: %s", out)
	}
	h.mustCLI("grant", "--user", "1001", "dev42", "http")
	h.mustCLI("grant", "--group", "2000", "@sensors", "*")

	if out, err := resolve(1001, 1001); err != nil || strings.TrimSpace(out) != sock {
		t.Fatalf("granted user resolve: %v %s", err, out)
	}
	if out, err := curl(1001, 1001); err != nil || out != "sensor 42" {
		t.Fatalf("granted user: %v %s", err, out)
	}
	// ops is in group operators (2000) in the hub's user database.
	if out, err := curl(1002, 1002, 2000); err != nil || out != "sensor 42" {
		t.Fatalf("granted group: %v %s", err, out)
	}
	if out, err := resolve(1002, 1002, 2000); err != nil || strings.TrimSpace(out) != sock {
		t.Fatalf("granted group resolve: %v %s", err, out)
	}

	out, err := resolve(1003, 1003)
	if err == nil || !strings.Contains(out, "permission denied: uid 1003 (stranger) may not reach dev42/http") {
		t.Fatalf("stranger resolve: %v %s", err, out)
	}
	if out, err := curl(1003, 1003); err == nil {
		t.Fatalf("stranger reached the socket directly: %s", out)
	}
	h.log.wait(t, "local connection refused", "device", "dev42")
	ev := h.events("dev42", "access_denied")
	var sawResolve, sawConnect bool
	for _, e := range ev {
		sawResolve = sawResolve || strings.HasPrefix(e.Detail, "resolve: permission denied: uid 1003")
		sawConnect = sawConnect || strings.HasPrefix(e.Detail, "connect: permission denied: uid 1003")
	}
	if !sawResolve || !sawConnect {
		t.Fatalf("access_denied events: %+v", ev)
	}

	h.mustCLI("ungrant", "--user", "1001", "dev42", "http")
	if out, err := curl(1001, 1001); err == nil {
		t.Fatalf("ungranted user still gets through: %s", out)
	}
	if out, err := curl(1002, 1002, 2000); err != nil {
		t.Fatalf("the group grant must be unaffected: %v %s", err, out)
	}
	// Leaving the group ends the wide permission at once; joining again restores it.
	h.mustCLI("device", "set-groups", "dev42")
	if out, err := curl(1002, 1002, 2000); err == nil {
		t.Fatalf("group permission survived leaving the device group: %s", out)
	}
	h.mustCLI("device", "set-groups", "dev42", "sensors", "floor-2")
	if out, err := curl(1002, 1002, 2000); err != nil {
		t.Fatalf("group permission not back after rejoining: %v %s", err, out)
	}
	if d := h.mustCLI("device", "show", "dev42"); !strings.Contains(d, "floor-2, sensors") {
		t.Fatalf("device show does not list the groups:\n%s", d)
	}
	grants := h.mustCLI("grants")
	if !strings.Contains(grants, "@sensors") || strings.Contains(grants, "dev42  http") {
		t.Fatalf("grants:\n%s", grants)
	}
}

// A hub run as an ordinary user still denies through the user-space layer.
func TestAccessControlHubWithoutRoot(t *testing.T) {
	needRoot(t)
	h := startHubWith(t, "", "", func(h *hubProc) {
		reachable(t, h.data)
		filepath.Walk(h.data, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, 1001, 1001) })
		h.cred = &syscall.Credential{Uid: 1001, Gid: 1001}
	})
	key := h.addDevice("dev1")
	filepath.Walk(h.data, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, 1001, 1001) })
	app := deviceApp(t, "unprivileged hub")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	sock := h.socket("dev1", "http")
	if out, err := as(t, 1003, 1003, nil, "curl", "-sS", "--fail", "--max-time", "20", "http://"+sock+"/"); err == nil {
		t.Fatalf("another user reached a device of an unprivileged hub: %s", out)
	}
	// The hub's own user is trusted (its front door checks people itself).
	if out, err := as(t, 1001, 1001, nil, "curl", "-sS", "--fail", "--max-time", "20", "http://"+sock+"/"); err != nil || out != "unprivileged hub" {
		t.Fatalf("hub's own uid: %v %s", err, out)
	}
}
