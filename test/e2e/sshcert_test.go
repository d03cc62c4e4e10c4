package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
)

// keygen makes an ed25519 key pair with the stock ssh-keygen and returns its path.
func keygen(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if out, err := exec.Command(needTool(t, "ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	return p
}

// stockSign signs key.pub with the CA key ca using the stock ssh-keygen, with extra
// options (-n principals, -V validity, -O options), and returns the certificate's path.
func stockSign(t *testing.T, ca, key, id string, serial int, opts ...string) string {
	t.Helper()
	args := append([]string{"-q", "-s", ca, "-I", id, "-z", strconv.Itoa(serial)}, opts...)
	if out, err := exec.Command(needTool(t, "ssh-keygen"), append(args, key+".pub")...).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -s: %v\n%s", err, out)
	}
	return key + "-cert.pub"
}

// SSH certificates (issue 51, item 2): the hub signs a device's key; the stock OpenSSH
// client logs in with it (CertificateFile) and serves; revoking the certificate closes
// its session at once and refuses it after, and the KRL says so to stock ssh-keygen.
// Certificates expired, not yet valid, from an untrusted CA, with two principals or a
// critical option the hub does not understand are refused with the reason on the
// device's screen and an audit event.
func TestSSHCertificates(t *testing.T) {
	ssh := needTool(t, "ssh")
	h := startHub(t, "", "")
	if out, err := h.cli("ca", "sign", "dev-c", "--pubkey", "/dev/null"); err == nil || !strings.Contains(out, "--pubkey") {
		t.Fatalf("ca sign of an empty key file: %v\n%s", err, out)
	}
	out := h.mustCLI("ca", "init")
	if !strings.Contains(out, "@cert-authority * ssh-ed25519 ") {
		t.Fatalf("ca init:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(h.data, "ssh_ca", "ca_ed25519")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the CA key: %v %v", fi, err)
	}
	if list := h.mustCLI("ca", "list"); !strings.Contains(list, "hub") || !strings.Contains(list, "enrolled devices only") {
		t.Fatalf("ca list:\n%s", list)
	}
	h.addDevice("dev-c") // enrolled with a key of its own; the certificate is of another
	dir := t.TempDir()
	key := keygen(t, dir, "dev-c")
	out = h.mustCLI("ca", "sign", "dev-c", "--pubkey", key+".pub", "--validity", "24h")
	if !strings.Contains(out, key+"-cert.pub") {
		t.Fatalf("ca sign:\n%s", out)
	}
	var certs []struct {
		Serial string `json:"serial"`
		Device string `json:"device"`
	}
	json.Unmarshal([]byte(h.mustCLIStdout("ca", "certs", "-o", "json")), &certs)
	if len(certs) != 1 || certs[0].Device != "dev-c" {
		t.Fatalf("ca certs: %+v", certs)
	}

	app := deviceApp(t, "hello from a certified device")
	sess := startProc(t, ssh, append(sshArgs(h, key), "-o", "CertificateFile="+key+"-cert.pub", "-R", "http:80:"+hostPortOf(app), "dev-c@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev-c")
	mustGet(t, h.socket("dev-c", "http"), "hello from a certified device")

	// Revoked: the live session closes now; the next login is refused.
	out = h.mustCLI("ca", "revoke", certs[0].Serial, "--reason", "lost in the field")
	if !strings.Contains(out, "closed 1 live session") {
		t.Fatalf("ca revoke:\n%s", out)
	}
	sess.waitExit(t)
	msg, err := exec.Command(ssh, append(sshArgs(h, key), "-o", "CertificateFile="+key+"-cert.pub", "dev-c@127.0.0.1")...).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "the certificate is revoked") {
		t.Fatalf("a revoked certificate: %v\n%s", err, msg)
	}
	krl := filepath.Join(dir, "revoked.krl")
	h.mustCLI("ca", "krl", "--out", krl)
	if out, err := exec.Command(needTool(t, "ssh-keygen"), "-Q", "-f", krl, key+"-cert.pub").CombinedOutput(); err == nil || !strings.Contains(string(out), "REVOKED") {
		t.Fatalf("ssh-keygen -Q of the revoked certificate: %v\n%s", err, out)
	}

	// What is refused, each with its reason, signed by the stock ssh-keygen.
	ca := filepath.Join(h.data, "ssh_ca", "ca_ed25519")
	rogue := keygen(t, dir, "rogue-ca")
	for i, c := range []struct {
		what, says string
		sign       func(k string) string
	}{
		{"expired", "expired at", func(k string) string {
			return stockSign(t, ca, k, "old", 101, "-n", "dev-c", "-V", "20200101:20200102")
		}},
		{"not yet valid", "not valid before", func(k string) string { return stockSign(t, ca, k, "future", 102, "-n", "dev-c", "-V", "+1d:+2d") }},
		{"an untrusted CA", "a CA this hub does not trust", func(k string) string { return stockSign(t, rogue, k, "rogue", 103, "-n", "dev-c") }},
		{"two principals", "exactly one device", func(k string) string { return stockSign(t, ca, k, "two", 104, "-n", "dev-c,dev-d") }},
		{"a critical option", "critical option this hub does not understand: force-command", func(k string) string {
			return stockSign(t, ca, k, "forced", 105, "-n", "dev-c", "-O", "force-command=/bin/true")
		}},
		{"another device's name", `the certificate is for "dev-x"`, func(k string) string { return stockSign(t, ca, k, "other", 106, "-n", "dev-x") }},
	} {
		k := keygen(t, t.TempDir(), "dev-c")
		cert := c.sign(k)
		msg, err := exec.Command(ssh, append(sshArgs(h, k), "-o", "CertificateFile="+cert, "dev-c@127.0.0.1")...).CombinedOutput()
		if err == nil || !strings.Contains(string(msg), c.says) {
			t.Errorf("%d. %s: %v\n%s", i, c.what, err, msg)
		}
	}
	// Audited: the first refusal of a device from one address a minute (a device that
	// keeps retrying cannot fill the log), the rest are in the hub's log.
	if ev := h.events("dev-c", "ssh_cert_refused"); len(ev) == 0 || !strings.Contains(ev[0].Detail, "the certificate is revoked") || !strings.Contains(ev[0].Detail, certs[0].Serial) {
		t.Errorf("the revoked certificate in the audit log: %+v", ev)
	}
	h.log.wait(t, "handshake failed", "err", "[ssh: no auth passed yet, the certificate has a critical option this hub does not understand: force-command, unknown key]")
}

// Zero-touch enrolment (issue 51, item 3): the operator trusts a manufacturer's CA for
// a name pattern and a profile; a device with a certificate of that CA (signed at the
// factory with the stock ssh-keygen) is enrolled on its first connection and serves
// through the agent; a second key with the same principal is refused as a cloned
// identity and audited; with --approve manual the device waits for the operator.
func TestZeroTouchEnrolment(t *testing.T) {
	h := startHub(t, "", "")
	factory := t.TempDir()
	acme := keygen(t, factory, "acme-ca")
	if out, err := h.cli("ca", "trust", acme+".pub", "--name", "acme", "--names", "sensor-*", "--profile", "nosuch"); err == nil || !strings.Contains(out, "nosuch") {
		t.Fatalf("a CA with an unknown profile: %v\n%s", err, out)
	}
	h.mustCLI("ca", "trust", acme+".pub", "--name", "acme", "--names", "sensor-*", "--profile", "default")

	// At the factory: the device's key, made on the device, and the CA's certificate.
	dev := t.TempDir()
	key := keygen(t, dev, "sensor-7")
	stockSign(t, acme, key, "acme sensor-7", 7007, "-n", "sensor-7", "-V", "-5m:+520w")
	app := deviceApp(t, "hello from sensor-7, never enrolled by hand")
	a := startProc(t, iotsafeBin, "agent", "--hub", h.addr, "--hub-key", h.hostFP, "--key", key, "--expose", "http="+hostPortOf(app), "--log-format", "json")
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("sensor-7", "http"), "hello from sensor-7, never enrolled by hand")
	if ev := h.events("sensor-7", "enrolled_by_certificate"); len(ev) != 1 || !strings.Contains(ev[0].Detail, "acme") {
		t.Fatalf("the enrolment event: %+v", ev)
	}

	// A clone: another key, a certificate of the same CA for the same name.
	clone := keygen(t, t.TempDir(), "sensor-7")
	cert := stockSign(t, acme, clone, "acme sensor-7 clone", 7008, "-n", "sensor-7")
	msg, err := exec.Command(needTool(t, "ssh"), append(sshArgs(h, clone), "-o", "CertificateFile="+cert, "sensor-7@127.0.0.1")...).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "enrolled with another key") {
		t.Fatalf("a cloned identity: %v\n%s", err, msg)
	}
	if ev := h.events("sensor-7", "ssh_cert_refused"); len(ev) == 0 || !strings.Contains(ev[0].Detail, "cloned") {
		t.Fatalf("the clone in the audit log: %+v", ev)
	}
	// A name outside the CA's pattern: nothing enrolled.
	cam := keygen(t, t.TempDir(), "cam-1")
	cert = stockSign(t, acme, cam, "acme cam-1", 7009, "-n", "cam-1")
	msg, err = exec.Command(needTool(t, "ssh"), append(sshArgs(h, cam), "-o", "CertificateFile="+cert, "cam-1@127.0.0.1")...).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "vouches for names sensor-*") {
		t.Fatalf("a name outside the pattern: %v\n%s", err, msg)
	}
	if out, err := h.cli("device", "show", "cam-1"); err == nil {
		t.Fatalf("cam-1 was enrolled:\n%s", out)
	}

	// Manual approval: enrolled on first connect, waiting; approved, it connects.
	door := keygen(t, factory, "door-ca")
	h.mustCLI("ca", "trust", door+".pub", "--name", "doors", "--names", "door-*", "--profile", "default", "--approve", "manual")
	dk := keygen(t, t.TempDir(), "door-1")
	cert = stockSign(t, door, dk, "door-1", 1, "-n", "door-1")
	msg, err = exec.Command(needTool(t, "ssh"), append(sshArgs(h, dk), "-o", "CertificateFile="+cert, "door-1@127.0.0.1")...).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "waits for the operator's approval") {
		t.Fatalf("a device of a CA of manual approval: %v\n%s", err, msg)
	}
	h.mustCLI("device", "approve", "door-1")
	startProc(t, needTool(t, "ssh"), append(sshArgs(h, dk), "-o", "CertificateFile="+cert, "-R", "http:80:"+hostPortOf(app), "door-1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "door-1")

	// Untrusting the CA closes the sessions it vouched for.
	if out := h.mustCLI("ca", "untrust", "doors"); !strings.Contains(out, "closed 1 live session") {
		t.Fatalf("ca untrust:\n%s", out)
	}
}

// Host certificates (issue 51, item 2): two hubs on one PostgreSQL registry, each with a
// host certificate of the deployment's CA; an agent and a stock ssh client that trust
// only the CA (no pinned key) reach the second hub, and a device certificate signed by
// the first hub's CA is accepted by the second. A hub without a certificate is refused
// by such an agent.
func TestHostCertificateTrustsEveryHub(t *testing.T) {
	dsn := pgscratch.Start(t).Database(t)
	h1 := startSharedHub(t, dsn, "hub-1", "127.78.12.0/24", "")
	h2 := startSharedHub(t, dsn, "hub-2", "127.78.12.0/24", "")
	h1.mustCLI("ca", "init")
	caPub := filepath.Join(h1.data, "ssh_ca", "ca_ed25519.pub")
	key := h1.addDevice("dev-h")
	app := deviceApp(t, "hello via hub 2")

	// Before hub 2 has a certificate: an agent trusting the CA alone refuses it.
	refused := startProc(t, iotsafeBin, "agent", "--hub", h2.addr, "--hub-ca", caPub, "--key", key, "--expose", "http="+hostPortOf(app), "--log-format", "json")
	if refused.waitExit(t) == 0 || !strings.Contains(refused.stderr.text(), "the hub showed a plain key; this agent trusts hubs by their CA's certificate only") {
		t.Fatalf("an agent trusting the CA, to a hub without a certificate:\n%s", refused.stderr.text())
	}

	out := h1.mustCLI("ca", "sign-host", "--hub-data", h2.data, "--principal", "127.0.0.1")
	if !strings.Contains(out, "host_ed25519_key-cert.pub") {
		t.Fatalf("ca sign-host:\n%s", out)
	}
	h2.restartOnSamePort()
	h2.log.wait(t, "host certificate presented beside the host key")
	a := startProc(t, iotsafeBin, "agent", "--hub", h2.addr, "--hub-ca", caPub, "--key", key, "--expose", "http="+hostPortOf(app), "--log-format", "json")
	a.stderr.wait(t, "session up")
	mustGet(t, h2.socket("dev-h", "http"), "hello via hub 2")

	// The stock client: one @cert-authority line, no key of either hub; its device
	// certificate signed by hub 1's CA, accepted by hub 2.
	ca, _ := os.ReadFile(caPub)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh, []byte("@cert-authority * "+string(ca)), 0o600)
	h1.addDevice("dev-s")
	dk := keygen(t, t.TempDir(), "dev-s")
	h1.mustCLI("ca", "sign", "dev-s", "--pubkey", dk+".pub")
	startProc(t, needTool(t, "ssh"), "-N", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile="+kh,
		"-o", "ExitOnForwardFailure=yes", "-i", dk, "-p", h2.port, "-R", "http:80:"+hostPortOf(app), "dev-s@127.0.0.1")
	h2.log.wait(t, "reverse forward open", "device", "dev-s")
	mustGet(t, h2.socket("dev-s", "http"), "hello via hub 2")
	// Revoked through hub 1: hub 2, which holds the session, closes it.
	h1.mustCLI("ca", "revoke", "--cert", dk+"-cert.pub", "--reason", "test")
	h2.log.wait(t, "session closed", "device", "dev-s", "why", "certificate revoked")

	// Zero-touch on PostgreSQL: trusted through hub 1, enrolled at hub 2.
	acme := keygen(t, t.TempDir(), "acme-ca")
	h1.mustCLI("ca", "trust", acme+".pub", "--name", "acme", "--names", "pg-*", "--profile", "default")
	pk := keygen(t, t.TempDir(), "pg-1")
	stockSign(t, acme, pk, "pg-1", 1, "-n", "pg-1")
	startProc(t, iotsafeBin, "agent", "--hub", h2.addr, "--hub-ca", caPub, "--key", pk, "--expose", "http="+hostPortOf(app), "--log-format", "json").stderr.wait(t, "session up")
	if ev := h1.events("pg-1", "enrolled_by_certificate"); len(ev) != 1 {
		t.Fatalf("the enrolment at hub 2, seen from hub 1: %+v", ev)
	}
}

// Zero-touch at a gateway: the gateway trusts the manufacturer's CA; a device with its
// certificate is enrolled at the gateway on its first connection and announced to the
// centre, which serves it through the gateway.
func TestZeroTouchAtAGateway(t *testing.T) {
	p := startGatewayPair(t)
	acme := keygen(t, t.TempDir(), "acme-ca")
	p.gw.mustCLI("ca", "trust", acme+".pub", "--name", "acme", "--names", "cam-*", "--profile", "default")
	key := keygen(t, t.TempDir(), "cam-9")
	stockSign(t, acme, key, "cam-9", 9, "-n", "cam-9")
	app := deviceApp(t, "hello from cam-9, enrolled at gw1 by its certificate")
	startProc(t, iotsafeBin, "agent", "--hub", p.gw.addr, "--hub-key", p.gw.hostFP, "--key", key, "--expose", "http="+hostPortOf(app), "--log-format", "json").stderr.wait(t, "session up")
	p.centre.log.wait(t, "device behind gateway up", "device", "cam-9")
	mustGet(t, p.centre.socket("cam-9", "http"), "hello from cam-9, enrolled at gw1 by its certificate")
}
