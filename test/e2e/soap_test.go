package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// The SOAP path of paper 001 end to end, with the real hub and CLI: a device's key from
// 'iotsafe device soap-key', messages in both compact forms from 'iotsafe soap send' on
// the plain listener, over the device's SSH forward (where the pool address must match
// the key) and over the front door's HTTPS; the notifications read back over REST like
// any other; refusals are faults, audited, and on the SSH path violations; a revoked
// device's key stops at once.
func TestSOAPEndToEnd(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nrest: {listen: '127.0.0.1:0'}\nsoap: {enabled: true}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	if h.rest == "" || h.front == "" {
		t.Fatalf("hub printed no REST or front door address; log:\n%s", h.log.text())
	}
	h.log.wait(t, "SOAP endpoint on the front door")
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\ndirect: {api: %q}\n", h.rest))
	key1 := h.addDevice("dev1", "--profile", prof)
	h.addDevice("dev2")
	keyFile := filepath.Join(t.TempDir(), "dev1.soapkey")
	if err := os.WriteFile(keyFile, []byte(h.mustCLIStdout("device", "soap-key", "rotate", "dev1")), 0o600); err != nil {
		t.Fatal(err)
	}
	h.mustCLI("device", "soap-key", "rotate", "dev2")
	if out, err := h.cli("device", "soap-key", "rotate", "nodev"); err == nil || !strings.Contains(out, "enroll it first") {
		t.Fatalf("key for an unknown device: %v %s", err, out)
	}
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	// A platform app on the hub's MQTT broker sees SOAP notifications live too.
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	app, _ := startSub(t, "-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", "app", "-P", "app-password-1",
		"-V", "mqttv5", "-i", "app:app", "-t", "devices/+/notifications/#", "-v", "-d")
	app.waitText(t, "received SUBACK")

	// The CLI on the hub's machine: the key from the registry, the plain listener.
	for _, f := range []string{"csec", "secrec"} {
		out := h.mustCLIStdout("soap", "send", "--device", "dev1", "--format", f, "--name", "temperature", "--param", "value=21.5", "--count", "2")
		if strings.Count(out, "stored notification") != 2 {
			t.Fatalf("soap send --format %s: %s", f, out)
		}
	}
	// Over the device's SSH forward, with the key file a device would hold.
	fwd := freePort(t)
	a := startAgent(t, h, key1, "--forward", fwd+"=api")
	a.stderr.wait(t, "session up")
	out := h.mustCLIStdout("soap", "send", "--key-file", keyFile, "--url", "http://"+fwd+"/soap", "--format", "secrec", "--alg", "chacha20-poly1305", "--name", "status", "--text", "ok", "-o", "json")
	if !strings.Contains(out, `"algorithm":"chacha20-poly1305"`) {
		t.Fatalf("over the forward: %s", out)
	}
	// Over the front door's HTTPS, as a device outside would.
	k, err := wssec.ParseKey(mustRead(t, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := wssec.SuiteByName("aes256-gcm")
	fc := soap.NewClient("https://"+fdDomain+":"+portOf(h.front)+soap.Path, fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil), k, s, wssec.CSec)
	if _, err := fc.Notify(context.Background(), soap.Notification("door", "", [][2]string{{"state", "open"}})); err != nil {
		t.Fatalf("over the front door: %v", err)
	}

	app.waitText(t, `devices/dev1/notifications/door {"state":"open"}`)

	// REST readers see SOAP data like any other.
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	req, _ := http.NewRequest("GET", "https://"+fdDomain+":"+portOf(h.front)+"/api/rest/device/dev1/notification", nil)
	req.SetBasicAuth("app", "app-password-1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 200 || strings.Count(body, `"notification":"temperature"`) != 4 || !strings.Contains(body, `"state":"open"`) || !strings.Contains(body, `"value":"ok"`) {
		t.Fatalf("REST read of SOAP notifications: %d %s", resp.StatusCode, body)
	}

	// dev1's forward carrying dev2's key: refused, audited, a violation of dev1.
	key2 := filepath.Join(t.TempDir(), "dev2.soapkey")
	os.WriteFile(key2, []byte(h.mustCLIStdout("device", "soap-key", "rotate", "dev2")), 0o600)
	out, err = h.cli("soap", "send", "--key-file", key2, "--url", "http://"+fwd+"/soap", "--name", "x", "--text", "y")
	if err == nil || !strings.Contains(out, "wsse:SecurityTokenUnavailable") || !strings.Contains(out, "over dev1's SSH session") {
		t.Fatalf("another device's key over dev1's forward: %v %s", err, out)
	}
	if v := h.device("dev1").Violations; v != 1 {
		t.Fatalf("dev1 has %d violations, want 1", v)
	}
	if ev := h.events("dev1", soap.EventRefused); len(ev) != 1 {
		t.Fatalf("audit: %+v", ev)
	}
	// The paper's legacy suite is not accepted unless the operator opts in.
	out, err = h.cli("soap", "send", "--device", "dev1", "--alg", "aes128-cbc-sha1", "--name", "x", "--text", "y")
	if err == nil || !strings.Contains(out, "wsse:UnsupportedAlgorithm") {
		t.Fatalf("legacy suite: %v %s", err, out)
	}
	// Revocation stops the key at once.
	h.mustCLI("device", "revoke", "dev2", "--reason", "stolen")
	out, err = h.cli("soap", "send", "--key-file", key2, "--name", "x", "--text", "y")
	if err == nil || !strings.Contains(out, "revoked") {
		t.Fatalf("revoked device: %v %s", err, out)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The paper's legacy suite is accepted only when the operator names it and opts in; the
// hub warns at start, and a device using it is then served.
func TestSOAPLegacySuiteOptIn(t *testing.T) {
	h := startHub(t, "", "rest: {listen: '127.0.0.1:0'}\nsoap: {enabled: true, allow_legacy: true, algorithms: [aes128-gcm, aes128-cbc-sha1]}\n")
	h.log.waitText(t, "insecure algorithm enabled by soap.allow_legacy")
	h.addDevice("dev1")
	h.mustCLI("device", "soap-key", "rotate", "dev1")
	for _, f := range []string{"csec", "secrec"} {
		out := h.mustCLIStdout("soap", "send", "--device", "dev1", "--format", f, "--alg", "aes128-cbc-sha1", "--name", "t", "--text", "legacy")
		if !strings.Contains(out, "aes128-cbc-sha1") {
			t.Fatalf("%s: %s", f, out)
		}
	}
	if out, err := h.cli("soap", "send", "--device", "dev1", "--alg", "chacha20-poly1305", "--name", "t", "--text", "x"); err == nil || !strings.Contains(out, "UnsupportedAlgorithm") {
		t.Fatalf("a suite the operator did not list: %v %s", err, out)
	}
}
