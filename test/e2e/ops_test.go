package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// 'iotsafe demo' brings up a hub and three devices, serves through them, prints what to
// try, and stops cleanly on Ctrl-C (SIGINT) leaving no process behind. Every hint it
// prints runs exactly as printed, in the order printed, from the folder the demo ran in
// (issue 52): nothing appended, no --config, the commands find the hub by themselves.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "iotsafe-data") // the default folder, as 'make demo' has it
	cfg := dir + "/demo.yaml"
	os.WriteFile(cfg, []byte("ssh: {listen: '127.0.0.1:0'}\npool: {cidr: 127.79.250.0/24}\naccess: {kernel: off}\n"+
		"frontdoor: {listen: '127.0.0.1:0', domain: devices.localhost}\n"), 0o600)
	cmd := exec.Command(iotsafeBin, "demo", "--config", cfg, "--mqtt", "127.0.0.1:0", "--quiet=false")
	cmd.Dir = dir
	out, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	log := newLogWatch(stderr)
	sc := bufio.NewScanner(out)
	var text strings.Builder
	for sc.Scan() {
		text.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, out)
	s := text.String()
	for _, want := range []string{"device dev3", `through dev1's SSH session -> {"device":"dev1"`, "connect dev2 http",
		`through the front door (HTTPS, account demo) -> {"device":"dev1"`,
		// The operator console: logged in with the login it prints.
		"/console/ as account operator -> the fleet page, 3 device(s) online", "account operator, password demo-",
		`/device/dev1/notification as account demo (+telemetry) -> [{"id":`,
		// The same notification pushed to the account's WebSocket subscription.
		`/api/websocket as account demo, subscribed to dev1 -> {"action":"notification/insert","subscriptionId":1,"notification":{"id":`,
		// A command to dev1, answered by dev1, the answer read back.
		`/device/dev1/command as account demo (+command) -> {"id":`, "as dev1 -> 204",
		`/poll as account demo -> {"id":`, `"status":"done","result":{"blinked":3}`,
		// MQTT: dev2 over TLS, dev3 over its SSH session, both read back over REST.
		"MQTT over TLS   dev2", "MQTT over SSH   dev3",
		`/device/dev2/notification as account demo -> temperature {"celsius":19.5}`,
		`/device/dev3/notification as account demo -> temperature {"celsius":20.5}`,
		// SOAP: dev1 sends a WS Security Record over the front door.
		"as dev1 (a WS Security Record, aes128-gcm"} {
		if !strings.Contains(s, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, s)
		}
	}
	hints := demoHints(s)
	if len(hints) < 20 {
		t.Fatalf("only %d hints in the demo's output:\n%s", len(hints), s)
	}
	for _, hint := range hints {
		if strings.Contains(hint, " device revoke ") {
			demoChecksBeforeRevoke(t, data, log)
		}
		c := exec.Command("sh", "-c", hint)
		c.Dir = dir
		got, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(got), demoHintWants(hint)) {
			t.Fatalf("hint %q: %v\n%s", hint, err, got)
		}
	}
	if b, _ := filepath.Glob(filepath.Join(dir, "iotsafe-backup-*", "backup.json")); len(b) != 1 {
		t.Fatalf("the backup hint left no backup in the demo's folder: %v", b)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo exit after Ctrl-C: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop on SIGINT")
	}
	if pids, _ := exec.Command("pgrep", "-f", "iotsafe demo --config "+cfg).Output(); len(pids) != 0 {
		t.Fatalf("processes left behind: %s", pids)
	}
}

// demoHints are the command lines the demo prints for a person to run (indented, and
// starting with a command), in order.
func demoHints(out string) []string {
	var hints []string
	for _, line := range strings.Split(out, "\n") {
		l, ok := strings.CutPrefix(line, "  ")
		if !ok {
			continue
		}
		for _, start := range []string{iotsafeBin + " ", "printf ", "curl ", "mosquitto_pub "} {
			if strings.HasPrefix(l, start) {
				hints = append(hints, l)
				break
			}
		}
	}
	return hints
}

// demoHintWants is what a hint's output must show ("" for only exit status 0).
func demoHintWants(hint string) string {
	for _, w := range [][2]string{
		{"connect dev2 http", `"device":"dev2"`},
		{"/api/rest/token", `"accessToken"`},
		{"/api/rest/device/dev1/notification", `"notification":"temperature"`},
		{"curl ", `"device":"dev2"`}, // through the front door to dev2's app
		{" soap send ", "stored notification"},
		{" device agent-config dev2 ", "hub_key: SHA256:"},
		{" account token alice", "iots_"},
		{" mqtt status", "messages"},
		{" doctor", "OK    hub"},
		{" status", "running"},
		{" device list", "dev3"},
		{" hostkey list", "next"},
	} {
		if strings.Contains(hint, w[0]) {
			return w[1]
		}
	}
	return ""
}

// demoChecksBeforeRevoke: the demo's three devices are online and all learned the host key
// the hint added (over their sessions, the hub recording each proof).
func demoChecksBeforeRevoke(t *testing.T, data string, log *logWatch) {
	t.Helper()
	list, _ := exec.Command(iotsafeBin, "device", "list", "--data", data).CombinedOutput()
	if strings.Count(string(list), "online") != 3 {
		t.Fatalf("device list:\n%s", list)
	}
	log.waitText(t, "learned the hub's next host key")
	log.waitUntil(t, "the hub recording 3 proofs", func() bool {
		return strings.Count(log.raw.String(), "device learns the hub's next host key") >= 3
	})
	if got, _ := exec.Command(iotsafeBin, "hostkey", "list", "--data", data).CombinedOutput(); !strings.Contains(string(got), "learned by 3 of 3") {
		t.Fatalf("hostkey list on the demo's hub:\n%s", got)
	}
}

// Metrics are opt-in on loopback and count sessions, forwards and bytes.
func TestMetricsEndpoint(t *testing.T) {
	addr := freePort(t)
	h := startHub(t, "", "metrics: {listen: '"+addr+"'}\n")
	key := h.addDevice("dev1")
	app := deviceApp(t, "metered")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "http"), "metered")
	out, err := exec.Command("curl", "-sS", "--fail", "http://"+addr+"/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("metrics: %v %s", err, out)
	}
	for _, want := range []string{"iotsafe_sessions 1", "iotsafe_forwards 1", `iotsafe_handshakes_total{result="ok"} 1`, `iotsafe_device_sessions{device="dev1"} 1`, `iotsafe_bytes_total{direction="up"}`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// SIGHUP reloads what is safe (log level here) and keeps serving; a broken file is
// refused and the running configuration kept.
func TestSIGHUPReload(t *testing.T) {
	h := startHub(t, "", "")
	cfg, _ := os.ReadFile(h.config)
	os.WriteFile(h.config, append(cfg, []byte("  nonsense: 1\n")...), 0o600)
	h.cmd.Process.Signal(syscall.SIGHUP)
	h.log.wait(t, "reload refused; keeping the running configuration")
	os.WriteFile(h.config, []byte(strings.Replace(string(cfg), "level: debug", "level: info", 1)), 0o600)
	h.cmd.Process.Signal(syscall.SIGHUP)
	h.log.wait(t, "configuration reloaded (log level, keepalive and takeover timings; other changes need a restart)")
	key := h.addDevice("dev1")
	app := deviceApp(t, "after reload")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "http"), "after reload")
}

// 'iotsafe hub --check-config' says what a start or a reload would say of hub.yaml,
// without a hub and without creating anything: ok, the weak settings an operator turned
// on, or the refusal naming the file, line and field.
func TestHubCheckConfig(t *testing.T) {
	dir := t.TempDir()
	check := func(data string) (string, int) {
		out, err := exec.Command(iotsafeBin, "hub", "--check-config", "--data", data).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	missing := filepath.Join(dir, "not-yet")
	if out, code := check(missing); code != 0 || !strings.Contains(out, "does not exist): using defaults: ok") {
		t.Fatalf("no hub.yaml: %d %s", code, out)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the check created the data folder: %v", err)
	}
	cfg := filepath.Join(dir, "hub.yaml")
	os.WriteFile(cfg, []byte("ssh:\n  allow_insecure: true\n  ciphers: [aes128-gcm@openssh.com, aes128-cbc]\n"), 0o600)
	if out, code := check(dir); code != 0 || !strings.Contains(out, "warning: insecure setting") || !strings.Contains(out, "aes128-cbc") ||
		!strings.Contains(out, cfg+": ok") {
		t.Fatalf("an insecure cipher allowed: %d %s", code, out)
	}
	os.WriteFile(cfg, []byte("ssh:\n  listen: 127.0.0.1:2222\n  cipher: [aes128-cbc]\n"), 0o600)
	// Exit status 78 (EX_CONFIG), which the hub's unit does not retry.
	if out, code := check(dir); code != 78 || !strings.Contains(out, cfg+": config: ssh.cipher (line 3): field cipher not found") {
		t.Fatalf("a misspelt setting: %d %s", code, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the check wrote into the data folder: %v", entries)
	}
}

// 'iotsafe agent --check-config' says what the agent would do, with the device key's
// fingerprint to compare with the hub's, warns of a key others may read, creates no
// known_hosts file, and refuses what the agent would refuse, saying why.
func TestAgentCheckConfig(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "dev42")
	if out, err := exec.Command(needTool(t, "ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	fp, err := exec.Command("ssh-keygen", "-lf", key+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	knownHosts := filepath.Join(dir, "known_hosts")
	check := func(args ...string) (string, error) {
		base := []string{"agent", "--check-config", "--hub", "hub.example.com:2222", "--key", key}
		out, err := exec.Command(iotsafeBin, append(base, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := check("--known-hosts", knownHosts, "--trust-on-first-use", "--expose", "http=127.0.0.1:80", "--forward", "127.0.0.1:1883=broker")
	if err != nil || !strings.Contains(out, "agent configuration ok") || !strings.Contains(out, strings.Fields(string(fp))[1]) ||
		!strings.Contains(out, "created at the first connection") || !strings.Contains(out, "forward  127.0.0.1:1883=broker") {
		t.Fatalf("a good configuration: %v\n%s", err, out)
	}
	if strings.Contains(out, "warning") {
		t.Fatalf("a 0600 key warned of:\n%s", out)
	}
	if _, err := os.Stat(knownHosts); !os.IsNotExist(err) {
		t.Fatalf("the check created the known_hosts file: %v", err)
	}
	os.Chmod(key, 0o644)
	if out, _ := check("--hub-key", "SHA256:AAAA", "--expose", "http=127.0.0.1:80"); !strings.Contains(out, "warning: the key "+key+" is readable by group or others") {
		t.Fatalf("a key others may read:\n%s", out)
	}
	if out, err := check("--hub-key", "SHA256:AAAA", "--expose", "http"); err == nil || !strings.Contains(out, `--expose "http": want ALIAS=HOST:PORT`) {
		t.Fatalf("a malformed expose: %v\n%s", err, out)
	}
	if out, err := check("--expose", "http=127.0.0.1:80"); err == nil || !strings.Contains(out, "the hub's host key must be pinned") {
		t.Fatalf("no pin: %v\n%s", err, out)
	}
}

// Everything in the data folder is private to the hub except the resolver socket, which
// every local user may ask (answers depend on the caller's kernel credentials).
func TestDataFolderIsPrivate(t *testing.T) {
	h := startHub(t, "", "")
	h.addDevice("dev1")
	for name, want := range map[string]os.FileMode{"": 0o711, "/registry.db": 0o600, "/admin.sock": 0o600, "/resolver.sock": 0o666, "/host_ed25519_key": 0o600, "/keys/dev1": 0o600} {
		fi, err := os.Stat(h.data + name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
}
