package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// One local user who opens a thousand connections to the world-writable resolver socket
// holds at most its cap of them; other users' queries are answered meanwhile (the audit
// found every service stuck after such a flood, for good).
func TestResolverFloodByOneUser(t *testing.T) {
	needRoot(t)
	h := startHub(t, "", "")
	reachable(t, h.data)
	h.addDevice("dev1")
	// Debian's python3 (scripts/setup.sh installs it): reachable by any uid.
	flood := exec.Command("/usr/bin/python3", "-c", `
import socket, sys, time
held = []
for i in range(1000):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
print("ready", flush=True)
time.sleep(120)
`, filepath.Join(h.data, "resolver.sock"))
	flood.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1003, Gid: 1003}}
	flood.Dir = "/"
	out, _ := flood.StdoutPipe()
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flood.Process.Kill(); flood.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(line, "ready") {
		t.Fatalf("flooder: %q", line)
	}
	h.log.wait(t, "a peer holds too many connections; closing the new one", "listener", "resolver", "peer", "uid 1003")
	// While the flooder holds its connections, root's query is answered.
	if out := h.mustCLI("resolve", "dev1", "http"); !strings.Contains(out, "127.79.") {
		t.Fatalf("resolve during the flood: %s", out)
	}
}

// Revocation does not depend on the admin socket: with it gone (the audit's descriptor
// flood took it down), 'device revoke' still closes the live session, through the
// registry's change feed that the hub reads itself.
func TestRevokeWithoutTheAdminSocket(t *testing.T) {
	needTool(t, "ssh")
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "before")
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	if err := os.Remove(filepath.Join(h.data, "admin.sock")); err != nil {
		t.Fatal(err)
	}
	// A grant reaches the access policy the same way.
	h.mustCLI("grant", "--user", "1001", "dev1", "http")
	h.log.wait(t, "access policy loaded", "grants", "1")
	if out := h.mustCLI("device", "revoke", "dev1", "--reason", "stolen"); !strings.Contains(out, "within a second") {
		t.Fatalf("revoke without the admin socket said: %s", out)
	}
	h.log.wait(t, "closed sessions after a registry change made elsewhere", "event", "change_applied", "device", "dev1")
	h.log.wait(t, "session closed", "device", "dev1", "why", "key revoked")
}

// A local user who asks the resolver for many device names in a loop writes one
// access_denied event per operation and 10 s, not one per name.
func TestResolverDenialsAggregatedPerUser(t *testing.T) {
	needRoot(t)
	h := startHub(t, "", "")
	reachable(t, h.data)
	for i := 0; i < 50; i++ {
		out, err := as(t, 1003, 1003, nil, iotsafeBin, "resolve", fmt.Sprintf("dev%d", i), "http", "--data", h.data)
		if err == nil || !strings.Contains(out, "permission denied") {
			t.Fatalf("resolve as a stranger: %v %s", err, out)
		}
	}
	var n int
	for _, e := range h.events("", "access_denied") {
		if strings.Contains(e.Detail, "uid 1003") {
			n++
		}
	}
	// One per 10 s: the loop takes a few seconds, more windows only on a very slow machine;
	// without aggregation it would be 50.
	if n < 1 || n > 10 {
		t.Fatalf("%d access_denied events for 50 denied names", n)
	}
}
