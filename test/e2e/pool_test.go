package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The registry is the one source of the pool: a hub started with its configuration
// elsewhere records its pool, and an admin command run without --config (as the README
// shows) allocates from it, not from the default range.
func TestAdminCommandsAllocateFromTheHubsPool(t *testing.T) {
	elsewhere := filepath.Join(t.TempDir(), "hub.yaml")
	h := startHubWith(t, "", "", func(h *hubProc) {
		if err := os.Rename(h.config, elsewhere); err != nil {
			t.Fatal(err)
		}
		h.config = elsewhere
		h.args = []string{"--config", elsewhere}
	})
	cfg, _ := os.ReadFile(elsewhere)
	pool := strings.TrimSpace(strings.SplitN(strings.SplitN(string(cfg), "cidr: ", 2)[1], "\n", 2)[0])
	_, prefix, err := net.ParseCIDR(pool)
	if err != nil {
		t.Fatal(err)
	}
	h.addDevice("a1")
	if a := net.ParseIP(h.device("a1").Address); !prefix.Contains(a) {
		t.Fatalf("device added without --config got %v, outside the hub's pool %s", a, pool)
	}
	if out := h.mustCLI("pool", "show"); !strings.Contains(out, prefix.String()) {
		t.Fatalf("pool show: %s", out)
	}
	// Moving the pool needs the hub stopped: it binds the sockets being moved.
	if out, err := h.cli("pool", "move", "--cidr", "127.90.0.0/16"); err == nil || !strings.Contains(out, "in use") {
		t.Fatalf("pool move with the hub running: %v\n%s", err, out)
	}
	h.stop()

	// A configuration that names another pool is refused, with the way out.
	os.WriteFile(elsewhere, []byte(strings.Replace(string(cfg), pool, "127.90.0.0/16", 1)), 0o600)
	out, err := exec.Command(iotsafeBin, "hub", "--data", h.data, "--config", elsewhere).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "iotsafe pool move --cidr 127.90.0.0/16") {
		t.Fatalf("hub with another pool in its config: %v\n%s", err, out)
	}
	// The operator moves the pool; the hub starts with the new configuration and the
	// device's socket is inside it.
	if out := h.mustCLI("pool", "move", "--cidr", "127.90.0.0/16"); !strings.Contains(out, "moved a1") {
		t.Fatalf("pool move: %s", out)
	}
	h.start()
	if a := h.device("a1").Address; !strings.HasPrefix(a, "127.90.") {
		t.Fatalf("after the move a1 is at %s", a)
	}
	if evs := h.events("", "pool_moved"); len(evs) != 1 {
		t.Fatalf("pool_moved events: %+v", evs)
	}
}

// Ranges that would take addresses the host uses are refused at start with a reason.
func TestPoolsThatBreakTheHostAreRefused(t *testing.T) {
	for _, cidr := range []string{"127.0.0.0/8", "0.0.0.0/0", "10.99.0.0/16", "127.0.0.0/16"} {
		data := t.TempDir()
		cfg := filepath.Join(data, "hub.yaml")
		os.WriteFile(cfg, []byte("access: {kernel: off}\nssh: {listen: '127.0.0.1:0'}\npool: {cidr: '"+cidr+"'}\n"), 0o600)
		out, err := exec.Command(iotsafeBin, "hub", "--data", data).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "pool.cidr") {
			t.Errorf("pool %s: %v\n%s", cidr, err, out)
		}
	}
}

// A second hub on the same data folder is refused before it touches anything: the first
// keeps its resolver socket and keeps serving.
func TestSecondHubOnOneDataFolderIsRefused(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	out, err := exec.Command(iotsafeBin, "hub", "--data", h.data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use") {
		t.Fatalf("second hub: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(h.data, "resolver.sock")); err != nil {
		t.Fatalf("the first hub's resolver socket: %v", err)
	}
	needTool(t, "ssh")
	app := deviceApp(t, "still served")
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	mustGet(t, h.socket("dev1", "http"), "still served")
	if out := h.mustCLI("resolve", "dev1", "http"); !strings.Contains(out, ":") {
		t.Fatalf("resolve after the refused second hub: %s", out)
	}
}
