package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Revoke closes the live session at once and the key is refused from then on.
func TestRevokeClosesSessionAndRefusesKey(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "ok")
	p := startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	sock := h.socket("dev1", "http")
	mustGet(t, sock, "ok")

	out := h.mustCLI("device", "revoke", "dev1", "--reason", "stolen")
	if !strings.Contains(out, "closed 1 live session") {
		t.Fatalf("revoke did not report closing the session:\n%s", out)
	}
	h.log.wait(t, "session closed", "device", "dev1", "why", "key revoked")
	p.waitExit(t) // the stock client sees its session end
	if _, err := httpGet(t, sock); err == nil {
		t.Fatal("protected socket still serves after revoke")
	}

	again := exec.Command("ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	msg, err := again.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), `the key of device "dev1" is revoked`) {
		t.Fatalf("revoked key: err=%v, client saw:\n%s", err, msg)
	}
	if ev := h.events("dev1", "auth_refused"); len(ev) == 0 {
		t.Fatal("no auth_refused event for the revoked key")
	}
	if d := h.device("dev1"); d.Revoked == nil {
		t.Fatal("device show does not report the revocation")
	}
}

// A revoke made by mistake is undone with 'device reinstate' (issue 52.6): the stock
// client logs in again with the same key and serves on the same socket; the audit log
// says so; a second reinstate has nothing to undo and fails.
func TestReinstateUndoesARevoke(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "back")
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	sock := h.socket("dev1", "http")
	h.mustCLI("grant", "--user", "1001", "dev1", "http")
	h.mustCLI("device", "revoke", "dev1", "--reason", "by mistake")
	h.log.wait(t, "session closed", "device", "dev1", "why", "key revoked")
	// A connect to the revoked device says it is revoked, not "offline" (issue 52.9).
	if out, err := h.cli("connect", "dev1", "http"); err == nil || !strings.Contains(out, "device dev1 is revoked") || strings.Contains(out, "offline") {
		t.Fatalf("connect to a revoked device: %v %s", err, out)
	}
	if out := h.mustCLI("device", "reinstate", "dev1"); !strings.Contains(out, "reinstated dev1") {
		t.Fatalf("reinstate said: %s", out)
	}
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.waitN(t, 2, "reverse forward open", "device", "dev1")
	if again := h.socket("dev1", "http"); again != sock {
		t.Fatalf("the socket moved from %s to %s", sock, again)
	}
	mustGet(t, sock, "back")
	if d := h.device("dev1"); d.Revoked != nil {
		t.Fatal("device show still reports the revocation")
	}
	if ev := h.events("dev1", "reinstated"); len(ev) != 1 || !strings.Contains(ev[0].Detail, "1 key(s)") {
		t.Fatalf("audit: %+v", ev)
	}
	if gs := h.mustCLI("grants"); !strings.Contains(gs, "dev1") {
		t.Fatalf("the grant went with the revoke: %s", gs)
	}
	if out, err := h.cli("device", "reinstate", "dev1"); err == nil || !strings.Contains(out, "nothing to undo") {
		t.Fatalf("reinstating a device that is not revoked: %v %s", err, out)
	}
}

// After a hub restart the same sockets come back and agents reconnect by themselves.
func TestHubRestartKeepsSocketsAndAgentsReturn(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "still here")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	before := h.socket("dev1", "http")
	mustGet(t, before, "still here")

	h.stop()
	if h.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("hub exit code %d after SIGTERM", h.cmd.ProcessState.ExitCode())
	}
	a.stderr.wait(t, "session ended; reconnecting")
	// The restarted hub listens on a new port (127.0.0.1:0), so pin the old one in the config.
	cfg, _ := os.ReadFile(h.config)
	os.WriteFile(h.config, []byte(strings.Replace(string(cfg), "127.0.0.1:0", h.addr, 1)), 0o600)
	h.start()
	a.stderr.waitN(t, 2, "session up")
	if after := h.socket("dev1", "http"); after != before {
		t.Fatalf("socket moved across restart: %s -> %s", before, after)
	}
	mustGet(t, before, "still here")
}

// A forward outside the profile is refused, logged as a violation and counted; with
// on_violation: revoke the key is revoked after the threshold.
func TestOverLimitForwardRefusedAndLogged(t *testing.T) {
	h := startHub(t, "", "")
	prof := writeProfile(t, t.TempDir(), "name: cam\nreverse: {http: 0, rtsp: 0}\nmax_forwards: 1\nmax_sessions: 2\non_violation: {action: revoke, after: 2}\n")
	key := h.addDevice("dev1", "--profile", prof)
	app := deviceApp(t, "ok")
	// No ExitOnForwardFailure: the client keeps its session and reports the refusal.
	args := []string{"-N", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + h.knownHosts(), "-i", key, "-p", h.port,
		"-R", "http:80:" + hostPortOf(app), "-R", "rtsp:554:" + hostPortOf(app), "dev1@127.0.0.1"}
	p := startProc(t, "ssh", args...)
	h.log.wait(t, "profile violation", "device", "dev1")
	p.stderr.waitText(t, "remote port forwarding failed")
	ev := h.events("dev1", "violation")
	if len(ev) != 1 || !strings.Contains(ev[0].Detail, "over the limit of 1 forwards") {
		t.Fatalf("violation events: %+v", ev)
	}

	// An alias outside the profile: the second violation revokes the key.
	bad := exec.Command("ssh", append(sshArgs(h, key), "-R", "telnet:23:127.0.0.1:23", "dev1@127.0.0.1")...)
	bad.CombinedOutput()
	h.log.wait(t, "device revoked", "device", "dev1")
	ev = h.events("dev1", "violation")
	if len(ev) != 2 || !strings.Contains(ev[1].Detail, `"telnet"`) {
		t.Fatalf("violation events: %+v", ev)
	}
	if d := h.device("dev1"); d.Revoked == nil || d.Violations != 2 {
		t.Fatalf("device after 2 violations: %+v", d)
	}
	p.waitExit(t) // its session was closed by the automatic revoke
}

// Shells and commands are refused with a clear message and counted.
func TestShellAndExecRefused(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	args := []string{"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + h.knownHosts(), "-i", key, "-p", h.port, "dev1@127.0.0.1", "id"}
	out, err := exec.Command("ssh", args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not available on an iotsafe hub") {
		t.Fatalf("exec: err=%v out=%s", err, out)
	}
	if ev := h.events("dev1", "violation"); len(ev) != 1 {
		t.Fatalf("violations: %+v", ev)
	}
}

// A new session takes over the forwards of one whose agent was killed (SIGKILL) or
// froze (SIGSTOP: the TCP connection stays open but nobody answers).
func TestTakeoverOfDeadAndFrozenSessions(t *testing.T) {
	h := startHub(t, "", "  takeover_probe: 1s\n")
	key := h.addDevice("dev1")
	app := deviceApp(t, "ok")
	sock := ""
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		p := startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
		// Each round opens the forward twice (ssh, then the agent taking over).
		h.log.waitN(t, 2*i+1, "reverse forward open", "device", "dev1")
		sock = h.socket("dev1", "http")
		mustGet(t, sock, "ok")
		p.cmd.Process.Signal(sig)
		next := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
		next.stderr.wait(t, "session up")
		mustGet(t, sock, "ok") // no "address already in use": the new session serves at once
		next.cmd.Process.Kill()
		next.waitExit(t)
		h.log.waitN(t, 2*(i+1), "session closed", "device", "dev1")
	}
	if ev := h.events("dev1", "takeover"); len(ev) == 0 {
		t.Fatal("the frozen session was not recorded as taken over")
	}
}

// An agent refuses a hub whose host key is not the pinned one, and says so.
func TestAgentRefusesWrongHubKey(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	cmd := exec.Command(iotsafeBin, "agent", "--hub", h.addr, "--key", key, "--hub-key", "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "--expose", "http=127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "hub host key not trusted") {
		t.Fatalf("err=%v out=%s", err, out)
	}
	if n := h.log.count("session open"); n != 0 {
		t.Fatal("a session opened with an untrusted hub key")
	}
}

// Malformed config and profile files get errors that name the field, and change nothing.
func TestMalformedConfigAndProfileNameTheField(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, want string }{
		{"ssh:\n  listn: 127.0.0.1:2222\n", "listn"},
		{"ssh:\n  keepalive_interval: banana\n", "banana"},
		{"ssh:\n  ciphers: [arcfour]\n", "ssh.ciphers"},
		{"ssh:\n  kex: [diffie-hellman-group1-sha1]\n", "allow_insecure"},
		{"pool:\n  cidr: 10.0.0.0/33\n", "pool.cidr"},
		{"log: {level: loud}\n", "log.level"},
		{"frontdoor: {listen: 127.0.0.1:0, domain: d.localhost, tls: {suites: [DHE-RSA-AES128-GCM-SHA256]}}\n", "frontdoor.tls.suites: \"DHE-RSA-AES128-GCM-SHA256\": Go's TLS has no finite-field"},
		{"frontdoor: {listen: 127.0.0.1:0, domain: d.localhost, tls: {min_version: \"1.0\"}}\n", "frontdoor.tls.allow_insecure"},
	} {
		cfg := filepath.Join(dir, "bad.yaml")
		os.WriteFile(cfg, []byte(tc.yaml), 0o600)
		out, err := exec.Command(iotsafeBin, "hub", "--data", dir, "--config", cfg).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("config %q: err=%v, output does not name %q:\n%s", tc.yaml, err, tc.want, out)
		}
	}
	if out, err := exec.Command(iotsafeBin, "init", "--data", dir).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nmax_sessions: -1\n", "max_sessions"},
		{"name: p\nreverse: {HTTP: 80}\n", "reverse.HTTP"},
		{"name: p\ndirect: {broker: nowhere}\n", "direct.broker"},
		{"name: p\non_violation: {action: explode}\n", "on_violation.action"},
		{"name: p\nmax_sesions: 2\n", "max_sesions"},
	} {
		prof := writeProfile(t, dir, tc.yaml)
		out, err := exec.Command(iotsafeBin, "device", "add", "x", "--keygen", filepath.Join(dir, "k"), "--profile", prof, "--data", dir).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("profile %q: err=%v, output does not name %q:\n%s", tc.yaml, err, tc.want, out)
		}
	}
	out, _ := exec.Command(iotsafeBin, "device", "list", "-o", "json", "--data", dir).CombinedOutput()
	if strings.TrimSpace(string(out)) != "[]" {
		t.Fatalf("a refused enrolment left a device behind: %s", out)
	}
}

// A Unix-socket forward is outside every profile: refused and counted.
func TestUnixSocketForwardRefused(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	sock := filepath.Join(t.TempDir(), "s")
	out, err := exec.Command("ssh", append(sshArgs(h, key), "-R", "/tmp/iotsafe-e2e.sock:"+sock, "dev1@127.0.0.1")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "forwarding failed") {
		t.Fatalf("err=%v out=%s", err, out)
	}
	if ev := h.events("dev1", "violation"); len(ev) != 1 || !strings.Contains(ev[0].Detail, "Unix-socket") {
		t.Fatalf("violations: %+v", ev)
	}
}

// Key rotation: a second key works beside the first; revoking the first closes only the
// session that used it and refuses it from then on; the last active key cannot be
// revoked alone.
func TestKeyRotation(t *testing.T) {
	h := startHub(t, "", "")
	prof := writeProfile(t, t.TempDir(), "name: rot\nreverse: {http: 0, cfg: 0}\nmax_sessions: 2\n")
	oldKey := h.addDevice("dev1", "--profile", prof)
	oldApp, newApp := deviceApp(t, "old key"), deviceApp(t, "new key")
	p := startProc(t, "ssh", append(sshArgs(h, oldKey), "-R", "http:80:"+hostPortOf(oldApp), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	mustGet(t, h.socket("dev1", "http"), "old key")

	dir := t.TempDir()
	out := h.mustCLI("device", "key", "add", "dev1", "--keygen", dir)
	m := regexp.MustCompile(`key (SHA256:\S+) added to dev1`).FindStringSubmatch(out)
	f := regexp.MustCompile(`private key written to (\S+) `).FindStringSubmatch(out)
	if m == nil || f == nil {
		t.Fatalf("key add:\n%s", out)
	}
	newFP, newKey := m[1], f[1]
	if fi, err := os.Stat(newKey); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new private key: %v, mode %v", err, fi.Mode().Perm())
	}
	a := startAgent(t, h, newKey, "--expose", "cfg="+hostPortOf(newApp))
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "cfg"), "new key")
	show := h.mustCLI("device", "show", "dev1")
	if n := strings.Count(show, "(active,"); n != 2 {
		t.Fatalf("device show lists %d active keys, want 2:\n%s", n, show)
	}
	// The operator sees that the device has moved to the new key.
	if !strings.Contains(show, newFP+" (active, used by the last session,") {
		t.Fatalf("device show does not say the last session used the new key %s:\n%s", newFP, show)
	}

	oldFP := h.device("dev1").Keys[0].Fingerprint // keys are listed oldest first
	if oldFP == newFP {
		t.Fatalf("the new key is listed first:\n%s", show)
	}
	out = h.mustCLI("device", "key", "revoke", "dev1", oldFP)
	if !strings.Contains(out, "closed 1 live session(s)") {
		t.Fatalf("key revoke:\n%s", out)
	}
	p.waitExit(t) // the old key's session ended
	mustGet(t, h.socket("dev1", "cfg"), "new key")
	if n := h.log.count("session closed", "device", "dev1"); n != 1 {
		t.Fatalf("%d sessions closed, want only the old key's", n)
	}
	again := exec.Command("ssh", append(sshArgs(h, oldKey), "-R", "http:80:"+hostPortOf(oldApp), "dev1@127.0.0.1")...)
	if msg, err := again.CombinedOutput(); err == nil || !strings.Contains(string(msg), `the key of device "dev1" is revoked`) {
		t.Fatalf("revoked old key: err=%v, client saw:\n%s", err, msg)
	}
	if ev := h.events("dev1", "key_revoked"); len(ev) != 1 || !strings.Contains(ev[0].Detail, oldFP) {
		t.Fatalf("key_revoked events: %+v", ev)
	}
	if out, err := h.cli("device", "key", "revoke", "dev1", newFP); err == nil || !strings.Contains(out, "only active key") {
		t.Fatalf("revoking the last active key: %v\n%s", err, out)
	}
	if out, err := h.cli("device", "key", "add", "dev1", "--pubkey", oldKey+".pub"); err == nil || !strings.Contains(out, "belongs to device") {
		t.Fatalf("adding a key that is already enrolled: %v\n%s", err, out)
	}
}

// The agent picks up a rotated key installed in place of its key file: once the old key
// is revoked its session closes and it comes back with the new key, without a restart.
func TestAgentPicksUpRotatedKey(t *testing.T) {
	h := startHub(t, "", "")
	oldKey := h.addDevice("dev1")
	app := deviceApp(t, "rotated")
	keyFile := filepath.Join(t.TempDir(), "dev1")
	install := func(from string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(keyFile+".tmp", b, 0o600)
		if err := os.Rename(keyFile+".tmp", keyFile); err != nil {
			t.Fatal(err)
		}
	}
	install(oldKey)
	a := startAgent(t, h, keyFile, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	oldFP := h.device("dev1").Keys[0].Fingerprint

	out := h.mustCLI("device", "key", "add", "dev1", "--keygen", t.TempDir())
	f := regexp.MustCompile(`private key written to (\S+) `).FindStringSubmatch(out)
	m := regexp.MustCompile(`key (SHA256:\S+) added`).FindStringSubmatch(out)
	if f == nil || m == nil {
		t.Fatalf("key add:\n%s", out)
	}
	install(f[1])
	if out := h.mustCLI("device", "key", "revoke", "dev1", oldFP); !strings.Contains(out, "closed 1 live session(s)") {
		t.Fatalf("key revoke:\n%s", out)
	}
	a.stderr.wait(t, "device key changed on disk; using it from now on", "key", m[1])
	a.stderr.waitN(t, 2, "session up")
	mustGet(t, h.socket("dev1", "http"), "rotated")
	if d := h.device("dev1"); d.LastAlgos == nil || d.LastAlgos.Key != m[1] {
		t.Fatalf("the hub did not record the new key for the last session: %+v", d.LastAlgos)
	}
}

// A tightened profile stored with --restart-sessions closes the live sessions that use
// it at once, so the device comes back under it; without the flag it waits for new
// sessions, and says so.
func TestProfileAppliedToLiveSessions(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1", "--profile", writeProfile(t, t.TempDir(), "name: cam\nreverse: {http: 0, rtsp: 0}\n"))
	app := deviceApp(t, "ok")
	p := startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "-R", "rtsp:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1", "alias", "rtsp")

	tightened := writeProfile(t, t.TempDir(), "name: cam\nreverse: {http: 0}\n")
	if out := h.mustCLI("profile", "add", tightened); !strings.Contains(out, "applies to new sessions") {
		t.Fatalf("profile add without --restart-sessions:\n%s", out)
	}
	if out := h.mustCLI("profile", "add", tightened, "--restart-sessions"); !strings.Contains(out, "closed 1 live session(s)") {
		t.Fatalf("profile add --restart-sessions:\n%s", out)
	}
	h.log.wait(t, "session closed", "device", "dev1", "why", "profile cam changed")
	p.waitExit(t) // the stock client sees its session end

	// Back under the new version: rtsp is refused now.
	again := exec.Command("ssh", append(sshArgs(h, key), "-R", "rtsp:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	if msg, err := again.CombinedOutput(); err == nil || !strings.Contains(string(msg), "remote port forwarding failed") {
		t.Fatalf("rtsp under the tightened profile: err=%v, client saw:\n%s", err, msg)
	}
	if ev := h.events("", "profile_applied"); len(ev) != 1 {
		t.Fatalf("profile_applied events: %+v", ev)
	}
}
