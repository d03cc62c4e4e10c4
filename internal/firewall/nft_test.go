package firewall

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// testNetns creates a network namespace with loopback up and removes it at the end.
func testNetns(t *testing.T) (name string, fd int) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces and nftables (CI runs as root)")
	}
	for _, tool := range []string{"ip", "nft", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run 'make test' (scripts/setup.sh installs it)", tool)
		}
	}
	name = fmt.Sprintf("iotsafe-fw-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}
	f, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return name, int(f.Fd())
}

// listenIn opens a TCP listener inside the namespace: one locked thread enters it, the
// socket stays there after the thread leaves.
func listenIn(t *testing.T, fd int, addr string) net.Listener {
	t.Helper()
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // this thread is left in the namespace and dies with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- res{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	go func() {
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	return r.ln
}

// dialAs connects from inside the namespace as uid/gid with bash's /dev/tcp.
func dialAs(ns string, uid, gid int, addr netip.AddrPort) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--clear-groups",
		"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && read -t 10 -u 3 line && [ \"$line\" = hello ]", addr.Addr(), addr.Port()))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func TestKernelLayer(t *testing.T) {
	ns, fd := testNetns(t)
	before, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		t.Fatal(err)
	}
	sock := netip.MustParseAddrPort("127.77.0.1:10000")
	other := netip.MustParseAddrPort("127.77.0.2:10000")
	listenIn(t, fd, sock.String())
	listenIn(t, fd, other.String())
	plain := netip.MustParseAddrPort("127.0.0.1:10001")
	listenIn(t, fd, plain.String())

	k, err := NewKernelIn("iotsafe-test", fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Remove() })
	err = k.Apply(Rules{
		Pool:      netip.MustParsePrefix("127.77.0.0/16"),
		AllowUID:  []Entry{{ID: 1001, Addr: sock}},
		AllowGID:  []Entry{{ID: 2000, Addr: sock}},
		SuperUIDs: []uint32{0},
	})
	if err != nil {
		t.Fatal(err)
	}
	listing, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe-test").CombinedOutput()
	if err != nil || !strings.Contains(string(listing), "set allow_uid") || !strings.Contains(string(listing), "1001 . 127.77.0.1 . 10000") {
		t.Fatalf("table as nft sees it (%v):\n%s", err, listing)
	}
	for _, tc := range []struct {
		name     string
		uid, gid int
		to       netip.AddrPort
		ok       bool
	}{
		{"granted uid", 1001, 1001, sock, true},
		{"granted uid, other socket", 1001, 1001, other, false},
		{"granted gid", 1002, 2000, sock, true},
		{"stranger", 1003, 1003, sock, false},
		{"root", 0, 0, other, true},
		{"unprotected address", 1003, 1003, plain, true},
	} {
		err := dialAs(ns, tc.uid, tc.gid, tc.to)
		if (err == nil) != tc.ok {
			t.Errorf("%s: uid %d gid %d -> %s: err=%v, want ok=%v", tc.name, tc.uid, tc.gid, tc.to, err, tc.ok)
		}
		if err != nil && !tc.ok && !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: refused connections must fail at once with 'connection refused', got %v", tc.name, err)
		}
	}
	if n, err := k.Refused(); err != nil || n == 0 {
		t.Fatalf("refusals not counted: %d %v", n, err)
	}
	// Re-applying with the grant gone takes effect for the next connection.
	if err := k.Apply(Rules{Pool: netip.MustParsePrefix("127.77.0.0/16"), SuperUIDs: []uint32{0}}); err != nil {
		t.Fatal(err)
	}
	if err := dialAs(ns, 1001, 1001, sock); err == nil {
		t.Fatal("ungranted uid still gets through")
	}
	if err := k.Remove(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").Output(); err != nil || strings.Contains(string(out), "iotsafe-test") {
		t.Fatalf("table left behind: %s", out)
	}
	if err := dialAs(ns, 1003, 1003, sock); err != nil {
		t.Fatalf("without the table everyone connects again: %v", err)
	}
	after, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Fatalf("the host ruleset changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// dialFromAs connects from inside the namespace as uid, bound to source first (any user
// may bind any 127/8 address).
func dialFromAs(ns string, uid int, source netip.Addr, addr netip.AddrPort) error {
	script := fmt.Sprintf(`import socket
s = socket.socket()
s.settimeout(10)
s.bind((%q, 0))
s.connect((%q, %d))
assert s.recv(6) == b"hello\n"`, source, addr.Addr(), addr.Port())
	cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "/usr/bin/python3", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Only the hub's uid opens connections from a pool address: another local user bound to
// a device's address is refused at once (it would otherwise pose as the device to the
// hub's plain listeners), while the user's other connections and the hub's pass.
func TestKernelLayerPoolSenders(t *testing.T) {
	ns, fd := testNetns(t)
	plain := netip.MustParseAddrPort("127.0.0.1:10001")
	listenIn(t, fd, plain.String())
	k, err := NewKernelIn("iotsafe-test-senders", fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Remove() })
	const hubUID = 1005
	if err := k.Apply(Rules{Pool: netip.MustParsePrefix("127.77.0.0/16"), SuperUIDs: []uint32{0}, Senders: []uint32{hubUID}}); err != nil {
		t.Fatal(err)
	}
	dev := netip.MustParseAddr("127.77.0.9")
	for _, tc := range []struct {
		name   string
		uid    int
		source netip.Addr
		ok     bool
	}{
		{"another user from a pool address", 1003, dev, false},
		{"root from a pool address", 0, dev, false},
		{"the hub's uid from a pool address", hubUID, dev, true},
		{"another user from its own address", 1003, netip.MustParseAddr("127.0.0.1"), true},
	} {
		err := dialFromAs(ns, tc.uid, tc.source, plain)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err=%v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !tc.ok && !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: must fail at once with 'connection refused', got %v", tc.name, err)
		}
	}
	if n, err := k.Refused(); err != nil || n == 0 {
		t.Fatalf("refusals not counted: %d %v", n, err)
	}
}

func TestMask(t *testing.T) {
	if got := mask(20, 4); fmt.Sprint(got) != "[255 255 240 0]" {
		t.Fatal(got)
	}
	f := familyOf(netip.MustParsePrefix("fd77::/64"))
	if f.addrLen != 16 || len(f.key(Entry{ID: 1, Addr: netip.MustParseAddrPort("[fd77::1]:80")})) != 24 {
		t.Fatal("ipv6 key layout")
	}
}

// A table in one network namespace has one owner at a time; the claim ends with Release
// (or the process).
func TestClaimTable(t *testing.T) {
	old := ClaimDir
	ClaimDir = t.TempDir()
	defer func() { ClaimDir = old }()
	c, err := ClaimTable("iotsafe", -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ClaimTable("iotsafe", -1); !errors.Is(err, ErrTableOwned) || !strings.Contains(err.Error(), "access.table") {
		t.Fatalf("second claim: %v", err)
	}
	other, err := ClaimTable("iotsafe-b", -1)
	if err != nil {
		t.Fatalf("another table name: %v", err)
	}
	other.Release()
	c.Release()
	again, err := ClaimTable("iotsafe", -1)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Release()
}
