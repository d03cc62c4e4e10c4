package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// netns creates a network namespace with loopback up, removed at the end of the test.
func netns(t *testing.T) string {
	t.Helper()
	needRoot(t)
	for _, tool := range []string{"ip", "nft", "setpriv", "unshare"} {
		needTool(t, tool)
	}
	name := fmt.Sprintf("iotsafe-e2e-%d-%d", os.Getpid(), poolCounter.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}
	return name
}

// listenInNetns opens a TCP listener inside the namespace: one locked thread enters it,
// and the socket stays there after the thread is gone.
func listenInNetns(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // the thread stays in the namespace and ends with this goroutine
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
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
	return r.ln
}

// serveIn runs an HTTP device app listening inside the namespace.
func serveIn(t *testing.T, ns, body string) string {
	t.Helper()
	ln := listenInNetns(t, ns, "127.0.0.1:0")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// inNetnsWithUserDB runs the hub inside namespace ns with the test user database.
func inNetnsWithUserDB(ns string) func(*hubProc) {
	return func(h *hubProc) {
		inUserDB(testPasswd, testGroup)(h)
		h.wrap = append([]string{"ip", "netns", "exec", ns}, h.wrap...)
	}
}

// deviceInNetns enrolls a device whose application and agent run inside namespace ns,
// waits until its session is up, and returns the agent.
func deviceInNetns(t *testing.T, h *hubProc, ns, name, body string, addArgs ...string) *proc {
	t.Helper()
	key := h.addDevice(name, addArgs...)
	app := serveIn(t, ns, body)
	a := startProc(t, "ip", "netns", "exec", ns, iotsafeBin, "agent", "--hub", h.addr, "--key", key, "--hub-key", h.hostFP,
		"--log-format", "json", "--expose", "http="+app)
	a.stderr.wait(t, "session up")
	return a
}

// curlIn fetches from inside the namespace as uid/gid (with extra groups, comma-separated).
func curlIn(t *testing.T, ns string, uid, gid int, groups, url string) (string, error) {
	t.Helper()
	g := "--clear-groups"
	if groups != "" {
		g = "--groups=" + groups
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), g,
		"curl", "-sS", "--fail", "--max-time", "20", url).CombinedOutput()
	return string(out), err
}

// The kernel layer: the hub's own nftables table lets a permitted uid or group through
// and refuses everyone else before the hub even sees the connection; the table is gone
// after the hub stops and the host's ruleset never changes.
func TestAccessControlKernel(t *testing.T) { forEachListenerMode(t, testAccessControlKernel) }

func testAccessControlKernel(t *testing.T, extra string) {
	ns := netns(t)
	hostBefore, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := startHubWith(t, "", "access: {kernel: on}\n"+extra, inNetnsWithUserDB(ns))
	reachable(t, h.data)
	h.log.wait(t, "kernel layer on")
	deviceInNetns(t, h, ns, "dev42", "sensor 42 in a namespace", "--group", "sensors")
	url := "http://" + h.socket("dev42", "http") + "/"

	h.mustCLI("grant", "--user", "1001", "dev42", "http")
	h.mustCLI("grant", "--group", "2000", "@sensors", "*")
	listing, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").CombinedOutput()
	if err != nil || !strings.Contains(string(listing), "1001 . ") || !strings.Contains(string(listing), "2000 . ") {
		t.Fatalf("hub table (%v):\n%s", err, listing)
	}
	if out, err := curlIn(t, ns, 1001, 1001, "", url); err != nil || out != "sensor 42 in a namespace" {
		t.Fatalf("granted uid: %v %s", err, out)
	}
	// ops is a member of operators (2000): through the socket's gid, and by uid from the group file.
	if out, err := curlIn(t, ns, 1002, 2000, "", url); err != nil {
		t.Fatalf("granted group as primary gid: %v %s", err, out)
	}
	if out, err := curlIn(t, ns, 1002, 1002, "2000", url); err != nil {
		t.Fatalf("granted group as supplementary group: %v %s", err, out)
	}
	out, err := curlIn(t, ns, 1003, 1003, "", url)
	if err == nil || !strings.Contains(out, "Failed to connect") {
		t.Fatalf("stranger: want connection refused by the kernel, got %v %s", err, out)
	}
	if n := h.log.count("local connection refused"); n != 0 {
		t.Fatal("the stranger's connection reached the hub: the kernel layer did not stop it")
	}
	h.log.wait(t, "access denied by the kernel layer")

	h.mustCLI("ungrant", "--user", "1001", "dev42", "http")
	if out, err := curlIn(t, ns, 1001, 1001, "", url); err == nil {
		t.Fatalf("ungrant did not stop new connections: %s", out)
	}

	h.stop()
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").CombinedOutput(); err != nil || strings.Contains(string(out), "iotsafe") {
		t.Fatalf("table left after the hub stopped (%v): %s", err, out)
	}
	hostAfter, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil || string(hostAfter) != string(hostBefore) {
		t.Fatalf("the host ruleset changed (%v)", err)
	}
}

// listenTCPIn opens a listener inside the namespace that answers "hello" to each connection.
func listenTCPIn(t *testing.T, ns, addr string) {
	t.Helper()
	ln := listenInNetns(t, ns, addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
}

func dialIn(ns string, uid int, host, port string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups",
		"bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port+" && read -t 10 -u 3 line && [ \"$line\" = hello ]")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// The device sandbox: while the agent runs with --sandbox-uid, that uid reaches loopback
// services only; other uids are unaffected; the rules go when the agent stops.
func TestAgentSandbox(t *testing.T) {
	dev, other := netns(t), netns(t)
	// A veth pair between the device and another host, on RFC 2544 benchmarking addresses.
	veth := fmt.Sprintf("isb%d", poolCounter.Add(1))
	for _, args := range [][]string{
		{"link", "add", veth + "a", "netns", dev, "type", "veth", "peer", "name", veth + "b", "netns", other},
		{"-n", dev, "addr", "add", "198.18.0.1/30", "dev", veth + "a"},
		{"-n", other, "addr", "add", "198.18.0.2/30", "dev", veth + "b"},
		{"-n", dev, "link", "set", veth + "a", "up"},
		{"-n", other, "link", "set", veth + "b", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	listenTCPIn(t, other, "198.18.0.2:8080")
	listenTCPIn(t, dev, "127.0.0.1:8081")
	const app, bystander = 1005, 1006
	if err := dialIn(dev, app, "198.18.0.2", "8080"); err != nil {
		t.Fatalf("before the sandbox the app reaches the other host: %v", err)
	}

	key := filepath.Join(t.TempDir(), "dev1")
	exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).Run()
	a := startProc(t, "ip", "netns", "exec", dev, iotsafeBin, "agent", "--hub", "127.0.0.1:1", "--key", key,
		"--hub-key", "SHA256:unused", "--expose", "http=127.0.0.1:8081", "--sandbox-uid", fmt.Sprint(app), "--log-format", "json")
	a.stderr.wait(t, "sandbox on")

	if err := dialIn(dev, app, "198.18.0.2", "8080"); err == nil {
		t.Fatal("sandboxed app reached a non-loopback address")
	}
	if err := dialIn(dev, app, "127.0.0.1", "8081"); err != nil {
		t.Fatalf("sandboxed app cannot reach loopback: %v", err)
	}
	if err := dialIn(dev, bystander, "198.18.0.2", "8080"); err != nil {
		t.Fatalf("another uid was confined too: %v", err)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.stderr.wait(t, "sandbox removed")
	a.waitExit(t)
	if err := dialIn(dev, app, "198.18.0.2", "8080"); err != nil {
		t.Fatalf("sandbox left behind after the agent stopped: %v", err)
	}
}

// An IPv6 pool works end to end once its prefix is local (ip -6 route add local ...):
// sockets bind, the agent's service is reached, and both access layers apply to IPv6.
func TestIPv6PoolWithBothLayers(t *testing.T) {
	ns := netns(t)
	if out, err := exec.Command("ip", "-n", ns, "-6", "route", "add", "local", "fd77:1::/64", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("local route: %v %s", err, out)
	}
	h := startHubWith(t, "", "access: {kernel: on}\n", func(h *hubProc) {
		os.WriteFile(h.config, []byte("log: {level: debug, format: json}\naccess: {kernel: on}\npool: {cidr: 'fd77:1::/64'}\nssh: {listen: '127.0.0.1:0'}\n"), 0o600)
		inNetnsWithUserDB(ns)(h)
	})
	reachable(t, h.data)
	h.log.wait(t, "kernel layer on")
	a := deviceInNetns(t, h, ns, "dev6", "over IPv6")
	sock := h.socket("dev6", "http")
	if !strings.HasPrefix(sock, "[fd77:1::") {
		t.Fatalf("socket %s is not from the IPv6 pool", sock)
	}
	h.mustCLI("grant", "--user", "1001", "dev6", "http")
	if out, err := curlIn(t, ns, 1001, 1001, "", "http://"+sock+"/"); err != nil || out != "over IPv6" {
		listing, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").CombinedOutput()
		t.Fatalf("granted uid over IPv6: %v %s\ntable:\n%s\nhub log:\n%s\nagent:\n%s", err, out, listing, h.log.text(), a.stderr.text())
	}
	if out, err := curlIn(t, ns, 1003, 1003, "", "http://"+sock+"/"); err == nil || !strings.Contains(out, "Failed to connect") {
		t.Fatalf("stranger over IPv6: want refused by the kernel, got %v %s", err, out)
	}
	listing, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").CombinedOutput()
	if !strings.Contains(string(listing), "ip6 daddr fd77:1::/64") || !strings.Contains(string(listing), "ipv6_addr") {
		t.Fatalf("IPv6 rules:\n%s", listing)
	}
}

// Two hubs on one host (one network namespace): the second leaves the first one's
// nftables table alone, running on the user-space layer, and stopping it does not
// delete the first one's rules.
func TestSecondHubLeavesTheFirstsTableAlone(t *testing.T) {
	ns := netns(t)
	inNs := func(h *hubProc) { h.wrap = []string{"ip", "netns", "exec", ns} }
	first := startHubWith(t, "", "access: {kernel: auto}\n", inNs)
	first.log.wait(t, "kernel layer on")
	second := startHubWith(t, "", "access: {kernel: auto}\n", inNs)
	second.log.waitText(t, "its table belongs to another hub")
	second.stop()
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").CombinedOutput(); err != nil {
		t.Fatalf("the first hub's table is gone after the second stopped: %v %s", err, out)
	}
	first.stop()
	if err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").Run(); err == nil {
		t.Fatal("the owner's table outlived it")
	}
}
