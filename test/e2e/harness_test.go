package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/childproc"
	"github.com/iotsafe/iotsafe/internal/hub"
)

var iotsafeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "iotsafe-e2e-")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755) // tests run the binary under other uids too
	// The race runtime sleeps 1 s at every exit (atexit_sleep_ms) so that other threads can
	// finish their reports; each CLI call of the tests paid it. Reports still print.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// The tests' hubs announce their data folders (iotsafe help data) here, never in
	// the host's /run/iotsafe; commands given no --data would look here too.
	os.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	os.Unsetenv("IOTSAFE_DATA")
	iotsafeBin = filepath.Join(dir, "iotsafe")
	build := exec.Command("go", "build", "-race", "-o", iotsafeBin, "../../cmd/iotsafe")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building iotsafe:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needTool fails (not skips) when a peer the suite promises is missing: make test installs them.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run 'make test' (scripts/setup.sh installs it)", name)
	}
	return p
}

// poolCounter gives each hub of the run its own /24 so tests never share addresses.
var poolCounter atomic.Int32

// logWatch collects a process's JSON log lines and lets tests wait for one.
type logWatch struct {
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	cond  *sync.Cond
	done  bool
}

// text is everything read so far (the reader goroutine may be appending).
func (w *logWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.raw.String()
}

// tail is the last n lines read so far.
func (w *logWatch) tail(n int) string {
	lines := strings.SplitAfter(w.text(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

func newLogWatch(r io.Reader) *logWatch {
	w := &logWatch{}
	w.cond = sync.NewCond(&w.mu)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			w.mu.Lock()
			w.raw.Write(sc.Bytes())
			w.raw.WriteByte('\n')
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				w.lines = append(w.lines, m)
			}
			w.cond.Broadcast()
			w.mu.Unlock()
		}
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
		w.mu.Lock()
		w.done = true
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	return w
}

func matches(m map[string]any, msg string, kv []string) bool {
	if m["msg"] != msg {
		return false
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if field(m[kv[i]]) != kv[i+1] {
			return false
		}
	}
	return true
}

// field is a JSON log field as text; whole numbers without an exponent (JSON numbers
// decode as float64, and an id of 2^32 would print as 4.294967296e+09).
func field(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return fmt.Sprint(v)
}

// count returns how many lines so far match.
func (w *logWatch) count(msg string, kv ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.lines {
		if matches(m, msg, kv) {
			n++
		}
	}
	return n
}

// last returns the fields of the last line that matches, nil if none does.
func (w *logWatch) last(msg string, kv ...string) map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.lines) - 1; i >= 0; i-- {
		if matches(w.lines[i], msg, kv) {
			return w.lines[i]
		}
	}
	return nil
}

// waitUntil blocks until cond (called with the lock held) holds or the process output
// ends. The 60 s deadline is a failure guard, not a timing assertion.
func (w *logWatch) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	defer w.endAfter(60 * time.Second).Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !cond() {
		if w.done {
			t.Fatalf("%s never came; output:\n%s", what, w.raw.String())
		}
		w.cond.Wait()
	}
}

// waitN blocks until at least n lines match msg and the key/value pairs.
func (w *logWatch) waitN(t *testing.T, n int, msg string, kv ...string) {
	t.Helper()
	w.waitUntil(t, fmt.Sprintf("log line %q %v (x%d)", msg, kv, n), func() bool {
		c := 0
		for _, m := range w.lines {
			if matches(m, msg, kv) {
				c++
			}
		}
		return c >= n
	})
}

func (w *logWatch) wait(t *testing.T, msg string, kv ...string) {
	t.Helper()
	w.waitN(t, 1, msg, kv...)
}

// ended reports whether the process's output has ended (it exited).
func (w *logWatch) ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// endAfter takes the output as ended after d, unless the timer is stopped first: a
// wait's failure guard.
func (w *logWatch) endAfter(d time.Duration) *time.Timer {
	return time.AfterFunc(d, func() {
		w.mu.Lock()
		w.done = true
		w.cond.Broadcast()
		w.mu.Unlock()
	})
}

// drained waits until the output has ended (all of it read), for at most d: a
// grandchild that kept the pipe open must not hang the test.
func (w *logWatch) drained(d time.Duration) {
	defer w.endAfter(d).Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.done {
		w.cond.Wait()
	}
}

// startWatched starts cmd (as a child that dies with the test binary, even when a
// timeout kills it before the cleanups run) with its standard error read into a
// logWatch. The pipe is our own, not StderrPipe: Wait closes that one's read end, and
// the last lines a process wrote before it exited would be lost to a reader not yet
// done. After Wait, drained says when all of it is read.
func startWatched(t *testing.T, cmd *exec.Cmd) *logWatch {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	err = childproc.Start(cmd)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	return newLogWatch(r)
}

// seen is closed once a line matching msg and the key/value pairs has come, or the
// output has ended.
func (w *logWatch) seen(msg string, kv ...string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		w.mu.Lock()
		defer w.mu.Unlock()
		for !w.done {
			for _, m := range w.lines {
				if matches(m, msg, kv) {
					return
				}
			}
			w.cond.Wait()
		}
	}()
	return ch
}

// waitText blocks until the raw output (JSON or not) contains s.
func (w *logWatch) waitText(t *testing.T, s string) {
	t.Helper()
	w.waitUntil(t, fmt.Sprintf("output %q", s), func() bool { return strings.Contains(w.raw.String(), s) })
}

type hubProc struct {
	t    *testing.T
	wrap []string // command prefix (namespaces, credentials); nil for none
	// cliWrap prefixes CLI commands (a mount namespace the data folder lives in).
	cliWrap []string
	args    []string // more arguments for 'iotsafe hub' (after --data)
	env     []string // more environment for 'iotsafe hub'
	cred    *syscall.Credential
	data    string
	config  string
	cmd     *exec.Cmd
	log     *logWatch
	addr    string // host:port of the SSH server
	front   string // host:port of the front door, if configured
	rest    string // host:port of the plain REST listener, if configured
	mqtt    string // host:port of the broker's plain and TLS listeners, if configured
	mqttTLS string
	metrics string // host:port of /metrics, if configured
	ready   hub.Ready
	port    string
	hostFP  string
	hostPK  string // authorized_keys form of the host key
	// printedKnownHosts are the known_hosts lines the hub printed at its last start: the
	// stock ssh of every test trusts the hub through them (knownHosts).
	printedKnownHosts []string
	// dumpArmed: the cleanup that shows the log of a failed test is registered.
	dumpArmed bool
}

// startHub runs 'iotsafe hub' on a fresh data folder (or the given one) with extra YAML.
func startHub(t *testing.T, data, extra string) *hubProc {
	t.Helper()
	return startHubWith(t, data, extra, nil)
}

// startHubWith is startHub with a setup hook that runs before the first start.
func startHubWith(t *testing.T, data, extra string, setup func(*hubProc)) *hubProc {
	t.Helper()
	if data == "" {
		data = t.TempDir()
	}
	cfgPath := filepath.Join(data, "hub.yaml")
	if _, err := os.Stat(cfgPath); err != nil {
		n := poolCounter.Add(1)
		// ssh comes last so that extra may add indented ssh settings or top-level sections.
		// Hubs in the host's network namespace must not touch its ruleset: the kernel
		// layer is tested in namespaces of its own (access_kernel_test.go).
		acc := "access: {kernel: off}\n"
		if strings.Contains(extra, "access:") {
			acc = ""
		}
		// A pool section in extra gets the run's range added to its settings.
		pool := fmt.Sprintf("pool:\n  cidr: 127.79.%d.0/24\n", n)
		if strings.HasPrefix(extra, "pool:\n") || strings.Contains(extra, "\npool:\n") {
			extra, pool = strings.Replace(extra, "pool:\n", pool, 1), ""
		}
		cfg := fmt.Sprintf("log: {level: debug, format: json}\n%s%sssh:\n  listen: 127.0.0.1:0\n%s", acc, pool, extra)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := &hubProc{t: t, data: data, config: cfgPath}
	if setup != nil {
		setup(h)
	}
	h.start()
	return h
}

func (h *hubProc) start() {
	t := h.t
	t.Helper()
	readyPath := filepath.Join(h.data, "ready.json")
	argv := append(append(append([]string{}, h.wrap...), iotsafeBin, "hub", "--data", h.data, "--ready-file", readyPath), h.args...)
	h.cmd = exec.Command(argv[0], argv[1:]...)
	if h.cred != nil {
		h.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: h.cred}
	}
	if h.env != nil {
		h.cmd.Env = append(os.Environ(), h.env...)
	}
	stdout, _ := h.cmd.StdoutPipe()
	h.log = startWatched(t, h.cmd)
	// The last start line says the hub is ready; its ready file then says the rest. The
	// printed host key must be the file's (people copy it from the output).
	sc := bufio.NewScanner(stdout)
	printedFP, up := "", false
	h.printedKnownHosts = nil
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); strings.HasPrefix(line, "host key ") && len(f) == 4 && printedFP == "" {
			printedFP = f[3]
		}
		if l, ok := strings.CutPrefix(line, "known_hosts line: "); ok {
			h.printedKnownHosts = append(h.printedKnownHosts, l)
		}
		if strings.HasPrefix(line, "hub listening for devices on ") {
			up = true
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if !up {
		h.cmd.Wait()
		h.log.drained(10 * time.Second)
		t.Fatalf("hub did not start; log:\n%s", h.log.text())
	}
	// Where the CLI runs (cliWrap): the data folder may live in a mount namespace.
	cat := append(append([]string{}, h.cliWrap...), "cat", readyPath)
	b, err := exec.Command(cat[0], cat[1:]...).Output()
	var ready hub.Ready
	if err == nil {
		err = json.Unmarshal(b, &ready)
	}
	if err != nil || len(ready.HostKeys) == 0 {
		t.Fatalf("ready file %s: %v\n%s", readyPath, err, b)
	}
	h.ready = ready
	h.addr, h.front, h.rest, h.mqtt, h.mqttTLS, h.metrics = ready.SSH, ready.Frontdoor, ready.REST, ready.MQTT, ready.MQTTTLS, ready.Metrics
	h.hostFP, h.hostPK = ready.HostKeys[0].Fingerprint, ready.HostKeys[0].PublicKey
	if printedFP != h.hostFP {
		t.Fatalf("the hub printed host key %s, its ready file says %s", printedFP, h.hostFP)
	}
	_, h.port, _ = net.SplitHostPort(h.addr)
	if !h.dumpArmed {
		// A failed test shows the end of each of its hubs' logs (after the stop below, as
		// cleanups run last first): a device that waited in vain says nothing of why.
		h.dumpArmed = true
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("hub %s, the end of its log:\n%s", h.data, h.log.tail(200))
			}
		})
	}
	t.Cleanup(h.stop)
}

// stop sends SIGTERM and waits: a clean shutdown must return.
func (h *hubProc) stop() {
	if h.cmd.ProcessState != nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	h.cmd.Wait()
	h.log.drained(10 * time.Second)
}

// cli runs an admin command against this hub's data folder.
func (h *hubProc) cli(args ...string) (string, error) {
	args = append(args, "--data", h.data)
	out, err := h.cliCommand(args...).CombinedOutput()
	return string(out), err
}

// cliCommand is iotsafe with args, run where the hub's data folder is.
func (h *hubProc) cliCommand(args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, h.cliWrap...), iotsafeBin), args...)
	return exec.Command(argv[0], argv[1:]...)
}

func (h *hubProc) mustCLI(args ...string) string {
	h.t.Helper()
	out, err := h.cli(args...)
	if err != nil {
		h.t.Fatalf("iotsafe %v: %v\n%s", args, err, out)
	}
	return out
}

// mustCLIStdout is mustCLI for commands whose standard output is data (a token).
func (h *hubProc) mustCLIStdout(args ...string) string {
	h.t.Helper()
	cmd := h.cliCommand(append(args, "--data", h.data)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("iotsafe %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// addDevice enrolls name with a fresh key and returns the private key path.
func (h *hubProc) addDevice(name string, extra ...string) string {
	keys := filepath.Join(h.data, "keys")
	h.mustCLI(append([]string{"device", "add", name, "--keygen", keys}, extra...)...)
	return filepath.Join(keys, name)
}

type deviceJSON struct {
	Name       string  `json:"name"`
	Address    string  `json:"address"`
	Revoked    *string `json:"revoked_at"`
	Online     bool    `json:"online"`
	Violations int     `json:"violations"`
	Hub        string  `json:"hub"`
	Keys       []struct {
		Fingerprint string `json:"fingerprint"`
	} `json:"keys"`
	Sockets []struct {
		Alias   string `json:"alias"`
		Address string `json:"address"`
	} `json:"sockets"`
	LastAlgos *struct {
		Kex    string `json:"kex"`
		Cipher string `json:"cipher"`
		Client string `json:"client_version"`
		Key    string `json:"device_key_fingerprint"`
	} `json:"last_algorithms"`
}

func (h *hubProc) device(name string) deviceJSON {
	h.t.Helper()
	var d deviceJSON
	if err := json.Unmarshal([]byte(h.mustCLI("device", "show", name, "-o", "json")), &d); err != nil {
		h.t.Fatal(err)
	}
	return d
}

func (h *hubProc) socket(name, alias string) string {
	h.t.Helper()
	for _, s := range h.device(name).Sockets {
		if s.Alias == alias {
			return s.Address
		}
	}
	h.t.Fatalf("device %s has no socket %s", name, alias)
	return ""
}

type eventJSON struct {
	Device, Kind, Detail string
}

func (h *hubProc) events(device, kind string) []eventJSON {
	h.t.Helper()
	var ev []eventJSON
	out := h.mustCLI("events", "--device", device, "--kind", kind, "-o", "json")
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		h.t.Fatalf("%v: %s", err, out)
	}
	return ev
}

// knownHosts writes an OpenSSH known_hosts file pinning this hub.
// knownHosts is a known_hosts file of the lines the hub printed at its start, as an
// operator copies them for a stock OpenSSH client.
func (h *hubProc) knownHosts() string {
	if len(h.printedKnownHosts) == 0 {
		h.t.Fatal("the hub printed no known_hosts line")
	}
	p := filepath.Join(h.data, "known_hosts")
	os.WriteFile(p, []byte(strings.Join(h.printedKnownHosts, "\n")+"\n"), 0o600)
	return p
}

// deviceApp is the device application: a real HTTP server on loopback.
func deviceApp(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func hostPortOf(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

// proc is a background client process (ssh, dbclient, iotsafe agent).
type proc struct {
	cmd    *exec.Cmd
	stderr *logWatch
	out    bytes.Buffer
	exited chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, name, args...)
}

// startProcEnv is startProc with extra environment variables.
func startProcEnv(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), exited: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = &p.out
	p.stderr = startWatched(t, p.cmd)
	go func() {
		p.cmd.Wait()
		p.stderr.drained(10 * time.Second)
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *proc) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("process did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

func sshArgs(h *hubProc, key string) []string {
	return []string{"-N", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + h.knownHosts(),
		"-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=5", "-i", key, "-p", h.port}
}

// startAgent runs 'iotsafe agent' pinned to the hub's fingerprint.
func startAgent(t *testing.T, h *hubProc, key string, args ...string) *proc {
	t.Helper()
	base := []string{"agent", "--hub", h.addr, "--key", key, "--hub-key", h.hostFP, "--log-format", "json", "--log-level", "debug"}
	return startProc(t, iotsafeBin, append(base, args...)...)
}

// httpGet fetches through a protected socket with the real curl.
func httpGet(t *testing.T, addr string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, needTool(t, "curl"), "-sS", "--fail", "http://"+addr+"/").CombinedOutput()
	return string(out), err
}

func mustGet(t *testing.T, addr, want string) {
	t.Helper()
	got, err := httpGet(t, addr)
	if err != nil || got != want {
		t.Fatalf("GET %s: got %q (%v), want %q", addr, got, err, want)
	}
}
