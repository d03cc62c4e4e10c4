package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
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

// serveIn runs an HTTP device app listening inside the namespace.
func serveIn(t *testing.T, ns, body string) string {
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
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		ch <- res{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(r.ln)
	t.Cleanup(func() { srv.Close() })
	return r.ln.Addr().String()
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
func TestAccessControlKernel(t *testing.T) {
	ns := netns(t)
	hostBefore, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := startHubWith(t, "", "access: {kernel: on}\n", func(h *hubProc) {
		inUserDB(testPasswd, testGroup)(h)
		h.wrap = append([]string{"ip", "netns", "exec", ns}, h.wrap...)
	})
	reachable(t, h.data)
	h.log.wait(t, "kernel layer on")
	key := h.addDevice("dev42", "--group", "sensors")
	app := serveIn(t, ns, "sensor 42 in a namespace")
	a := startProc(t, "ip", "netns", "exec", ns, iotsafeBin, "agent", "--hub", h.addr, "--key", key, "--hub-key", h.hostFP,
		"--log-format", "json", "--expose", "http="+app)
	a.stderr.wait(t, "session up")
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
