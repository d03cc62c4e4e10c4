package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// restartOnSamePort stops the hub and starts it again on its data folder, its SSH
// server on the address it had (devices and gateways dial that address again).
func (h *hubProc) restartOnSamePort() {
	h.t.Helper()
	h.stopKeepingPort()
	h.start()
}

// stopKeepingPort stops the hub; its next start listens on the SSH address it had.
func (h *hubProc) stopKeepingPort() {
	h.t.Helper()
	b, err := os.ReadFile(h.config)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "listen: 127.0.0.1:0\n", "listen: "+h.addr+"\n", 1)
	if err := os.WriteFile(h.config, []byte(cfg), 0o600); err != nil {
		h.t.Fatal(err)
	}
	h.stop()
}

// gatewayPair is a central hub and a gateway hub relaying to it (paper 000's three
// levels), both real 'iotsafe hub' processes on loopback with pools of their own.
type gatewayPair struct {
	centre, gw *hubProc
}

// startGatewayPair enrols gateway gw1 at a fresh centre with a gateway profile whose
// devices must be named cam-* (at most 3), and starts the gateway hub with the key.
func startGatewayPair(t *testing.T) gatewayPair { return startGatewayPairWith(t, "") }

// startGatewayPairWith adds extra to both hubs' configurations.
func startGatewayPairWith(t *testing.T, extra string) gatewayPair {
	t.Helper()
	centre := startHub(t, "", extra)
	prof := filepath.Join(t.TempDir(), "site-gw.yaml")
	if err := os.WriteFile(prof, []byte("name: site-gw\ngateway: {max_devices: 3, devices: ['cam-*']}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := centre.addDevice("gw1", "--profile", prof)
	gw := startHub(t, "", fmt.Sprintf("%supstream:\n  hub: %s\n  hub_key: %s\n  name: gw1\n  key: %s\n", extra, centre.addr, centre.hostFP, key))
	centre.log.wait(t, "session open", "device", "gw1")
	return gatewayPair{centre: centre, gw: gw}
}

// A device connected to a gateway is a device of the centre: its own protected socket
// there, reached with curl through the gateway's one session; 'device show' at the
// centre names the gateway and the device's session at the gateway.
func TestGatewayRelaysItsDevices(t *testing.T) {
	p := startGatewayPair(t)
	key := p.gw.addDevice("cam-1")
	app := deviceApp(t, "hello from cam-1 behind gw1")
	startAgent(t, p.gw, key, "--expose", "http="+hostPortOf(app))
	p.centre.log.wait(t, "device behind gateway up", "device", "cam-1")
	// The gateway multiplexes the centre's connections in one channel of its session.
	p.centre.log.wait(t, "multiplexed channel open", "device", "gw1")

	// Reached at the gateway as before, and at the centre through the gateway.
	mustGet(t, p.gw.socket("cam-1", "http"), "hello from cam-1 behind gw1")
	mustGet(t, p.centre.socket("cam-1", "http"), "hello from cam-1 behind gw1")
	mustGet(t, p.centre.socket("cam-1", "http"), "hello from cam-1 behind gw1")

	show := p.centre.mustCLI("device", "show", "cam-1")
	for _, want := range []string{"gateway", "gw1", "online", "iotsafe-agent"} {
		if !strings.Contains(show, want) {
			t.Errorf("device show at the centre lacks %q:\n%s", want, show)
		}
	}
	if d := p.centre.device("cam-1"); len(d.Keys) != 0 || !d.Online {
		t.Errorf("the centre's record of cam-1: %+v", d)
	}
	if st := p.gw.mustCLI("status"); !strings.Contains(st, "connected to "+p.centre.addr) || !strings.Contains(st, "1 devices announced") {
		t.Errorf("gateway status:\n%s", st)
	}

	// The device leaves the gateway: the centre closes its socket.
	p.gw.mustCLI("device", "revoke", "cam-1")
	p.centre.log.wait(t, "session closed", "device", "cam-1")
	if _, err := httpGet(t, p.centre.socket("cam-1", "http")); err == nil {
		t.Fatal("the centre still serves a device that left its gateway")
	}
}

// What a gateway's profile does not allow is refused at the centre and counted as the
// gateway's violation: a device name outside its patterns, and a device another
// gateway (or the centre itself) already holds. The device stays connected to its
// gateway.
func TestGatewayAnnouncementsOutsideItsProfileAreRefused(t *testing.T) {
	p := startGatewayPair(t)
	p.centre.addDevice("cam-9") // a direct device of the centre
	for _, name := range []string{"door-1", "cam-9"} {
		key := p.gw.addDevice(name)
		startAgent(t, p.gw, key, "--expose", "http="+hostPortOf(deviceApp(t, name)))
		p.centre.log.wait(t, "device announcement refused", "announced", name)
		mustGet(t, p.gw.socket(name, "http"), name) // still served at its gateway
	}
	var details []string
	for _, e := range p.centre.events("gw1", "violation") {
		details = append(details, e.Detail)
	}
	all := strings.Join(details, "\n")
	if !strings.Contains(all, `"door-1" is not among the names`) || !strings.Contains(all, `"cam-9" is enrolled at this hub as a direct device`) {
		t.Fatalf("violations of gw1:\n%s", all)
	}
	if out, err := p.centre.cli("device", "show", "door-1"); err == nil {
		t.Fatalf("a refused device was enrolled at the centre:\n%s", out)
	}
}

// Revoking a device at the centre closes it at its gateway at once and keeps it out
// there (the gateway revokes it too); revoking the gateway cuts all its devices.
func TestGatewayRevocationCrossesTheTier(t *testing.T) {
	p := startGatewayPair(t)
	for _, name := range []string{"cam-1", "cam-2"} {
		key := p.gw.addDevice(name)
		startAgent(t, p.gw, key, "--expose", "http="+hostPortOf(deviceApp(t, name)))
		p.centre.log.wait(t, "device behind gateway up", "device", name)
	}
	p.centre.mustCLI("device", "revoke", "cam-1")
	p.gw.log.wait(t, "device revoked by the centre", "device", "cam-1")
	if d := p.gw.device("cam-1"); d.Revoked == nil || d.Online {
		t.Fatalf("cam-1 at the gateway after its revocation at the centre: %+v", d)
	}
	mustGet(t, p.centre.socket("cam-2", "http"), "cam-2")

	p.centre.mustCLI("device", "revoke", "gw1")
	p.centre.log.wait(t, "session closed", "device", "cam-2")
	if _, err := httpGet(t, p.centre.socket("cam-2", "http")); err == nil {
		t.Fatal("a revoked gateway's device is still reachable at the centre")
	}
	mustGet(t, p.gw.socket("cam-2", "http"), "cam-2") // local devices stay at their gateway
}

// Faults: while the centre is down, devices stay connected to their gateway; the gateway
// reconnects and announces them again, and the centre serves each on the same socket
// address as before. A gateway restart closes its devices at the centre until they are
// back at the gateway, again on the same addresses.
func TestGatewaySurvivesRestarts(t *testing.T) {
	p := startGatewayPair(t)
	key := p.gw.addDevice("cam-1")
	startAgent(t, p.gw, key, "--expose", "http="+hostPortOf(deviceApp(t, "cam-1")))
	p.centre.log.wait(t, "device behind gateway up", "device", "cam-1")
	atCentre := p.centre.socket("cam-1", "http")
	mustGet(t, atCentre, "cam-1")

	p.centre.restartOnSamePort()
	p.gw.log.wait(t, "session to the centre ended; local devices stay connected; reconnecting")
	mustGet(t, p.gw.socket("cam-1", "http"), "cam-1")
	p.centre.log.wait(t, "device behind gateway up", "device", "cam-1")
	if got := p.centre.socket("cam-1", "http"); got != atCentre {
		t.Fatalf("after a centre restart cam-1 is at %s, was %s", got, atCentre)
	}
	mustGet(t, atCentre, "cam-1")
	if st := p.gw.mustCLI("status"); !strings.Contains(st, "1 reconnections") {
		t.Errorf("gateway status after the centre's restart:\n%s", st)
	}

	p.gw.restartOnSamePort()
	p.centre.log.wait(t, "session closed", "device", "cam-1")   // its gateway's session ended
	p.gw.log.wait(t, "reverse forward open", "device", "cam-1") // the agent is back
	p.centre.log.waitN(t, 2, "device behind gateway up", "device", "cam-1")
	if got := p.centre.socket("cam-1", "http"); got != atCentre {
		t.Fatalf("after a gateway restart cam-1 is at %s, was %s", got, atCentre)
	}
	mustGet(t, atCentre, "cam-1")
}

// deviceREST logs a device in at a hub's plain REST listener with a credential the hub
// issues (its secret, or a refresh token) and returns its access header.
func deviceREST(t *testing.T, h *hubProc, device string) string {
	t.Helper()
	refresh := strings.TrimSpace(h.mustCLIStdout("device", "token", device, "--expires", "1h"))
	code, toks, _ := restCall(t, http.DefaultClient, "POST", "http://"+h.rest+"/api/rest/token/refresh", "", map[string]string{"refreshToken": refresh})
	if code != 201 && code != 200 || toks["accessToken"] == nil {
		t.Fatalf("%s token at %s: %d %v\n%s", device, h.rest, code, toks, h.log.text())
	}
	return "Bearer " + toks["accessToken"].(string)
}

// notify posts one notification and returns its id.
func notify(t *testing.T, h *hubProc, device, auth, name string, params any) int64 {
	t.Helper()
	code, got, _ := restCall(t, http.DefaultClient, "POST", "http://"+h.rest+"/api/rest/device/"+device+"/notification", auth,
		map[string]any{"notification": name, "parameters": params})
	if code != 201 {
		t.Fatalf("%s's notification at %s: %d %v", device, h.rest, code, got)
	}
	return int64(got["id"].(float64))
}

// A device behind a gateway posts its notifications there (here over REST, with no
// alias to serve: it is never announced); the gateway relays them to the centre's
// store, where the device reads them back as from any hub. A centre restart loses
// nothing and stores nothing twice; a device the gateway may not relay is refused as
// the gateway's violation; a device revoked at the centre is revoked at its gateway at
// its next relayed notification.
func TestGatewayRelaysNotificationsToTheCentre(t *testing.T) {
	p := startGatewayPairWith(t, "rest: {listen: '127.0.0.1:0'}\nmetrics: {listen: '127.0.0.1:0'}\n")
	p.gw.addDevice("cam-1")
	cam := deviceREST(t, p.gw, "cam-1")
	for i := range 2 {
		notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 20 + i})
	}
	last := notify(t, p.gw, "cam-1", cam, "door", nil)
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(last))

	if show := p.centre.mustCLI("device", "show", "cam-1"); !strings.Contains(show, "gw1") {
		t.Fatalf("the centre's record of cam-1 does not name its gateway:\n%s", show)
	}
	atCentre := deviceREST(t, p.centre, "cam-1")
	list := func() []any {
		t.Helper()
		code, _, got := restCall(t, http.DefaultClient, "GET", "http://"+p.centre.rest+"/api/rest/device/cam-1/notification?take=100", atCentre, nil)
		if code != 200 {
			t.Fatalf("list at the centre: %d", code)
		}
		return got
	}
	got := list()
	if len(got) != 3 || got[0].(map[string]any)["notification"] != "temperature" || got[1].(map[string]any)["parameters"].(map[string]any)["c"] != float64(21) ||
		got[2].(map[string]any)["notification"] != "door" {
		t.Fatalf("cam-1's notifications at the centre: %v", got)
	}

	// The centre is down: the device goes on posting at its gateway; once the centre is
	// back, what it missed arrives, once.
	p.centre.stopKeepingPort()
	notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 30})
	last = notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 31})
	if st := p.gw.mustCLI("status"); !strings.Contains(st, "2 ids behind") {
		t.Errorf("gateway status while the centre is down:\n%s", st)
	}
	p.centre.start()
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(last))
	if got := list(); len(got) != 5 || got[4].(map[string]any)["parameters"].(map[string]any)["c"] != float64(31) {
		t.Fatalf("after the centre's restart, cam-1's notifications there: %v", got)
	}
	st := p.gw.mustCLI("status")
	if !strings.Contains(st, "relaying: 5 notifications stored at the centre") || !strings.Contains(st, "0 ids behind") || !strings.Contains(st, "0 duplicates") {
		t.Errorf("gateway status:\n%s", st)
	}
	resp, err := http.Get("http://" + p.gw.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"iotsafe_relay_stored_total 5", "iotsafe_relay_behind 0", "iotsafe_relay_lost_total 0", fmt.Sprintf("iotsafe_relay_mark %d", last)} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("gateway metrics lack %q:\n%s", want, grepLines(string(body), "iotsafe_relay_"))
		}
	}
	// The centre counts what it stored by gateway (since its restart: the last two).
	resp, err = http.Get("http://" + p.centre.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `iotsafe_relay_received_total{gateway="gw1"} 2`; !strings.Contains(string(body), want+"\n") {
		t.Errorf("centre metrics lack %q:\n%s", want, grepLines(string(body), "iotsafe_relay_"))
	}

	// A name the gateway's profile does not cover: refused, and the gateway's violation.
	p.gw.addDevice("door-1")
	notify(t, p.gw, "door-1", deviceREST(t, p.gw, "door-1"), "open", nil)
	p.gw.log.wait(t, "the centre refused a device's notifications; they stay here", "device", "door-1")
	var details []string
	for _, e := range p.centre.events("gw1", "violation") {
		details = append(details, e.Detail)
	}
	if all := strings.Join(details, "\n"); !strings.Contains(all, `"door-1" is not among the names gateway "gw1" may relay`) {
		t.Fatalf("violations of gw1:\n%s", all)
	}
	if out, err := p.centre.cli("device", "show", "door-1"); err == nil {
		t.Fatalf("a refused device was enrolled at the centre:\n%s", out)
	}

	// Revoked at the centre: its next notification is refused there, and the gateway
	// revokes it too.
	p.centre.mustCLI("device", "revoke", "cam-1")
	notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 40})
	p.gw.log.wait(t, "device revoked by the centre", "device", "cam-1")
	code, _, _ := restCall(t, http.DefaultClient, "POST", "http://"+p.gw.rest+"/api/rest/device/cam-1/notification", cam, map[string]any{"notification": "x"})
	if code != 401 {
		t.Fatalf("a device revoked by the centre still posts at its gateway: %d", code)
	}
}

// A centre restored from a backup has lost what its gateways relayed since: at the next
// session each gateway sends it again, says so, and nothing arrives twice.
func TestGatewayRefillsACentreRestoredFromABackup(t *testing.T) {
	p := startGatewayPairWith(t, "rest: {listen: '127.0.0.1:0'}\n")
	p.gw.addDevice("cam-1")
	cam := deviceREST(t, p.gw, "cam-1")
	first := notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 1})
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(first))

	p.centre.stopKeepingPort()
	backup := filepath.Join(t.TempDir(), "centre")
	if out, err := exec.Command("cp", "-a", p.centre.data, backup).CombinedOutput(); err != nil {
		t.Fatalf("backup: %v %s", err, out)
	}
	p.centre.start()
	notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 2})
	last := notify(t, p.gw, "cam-1", cam, "temperature", map[string]any{"c": 3})
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(last))

	p.centre.stopKeepingPort()
	if out, err := exec.Command("sh", "-c", `rm -rf "$1" && cp -a "$2" "$1"`, "restore", p.centre.data, backup).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v %s", err, out)
	}
	p.centre.start()
	p.gw.log.wait(t, "the centre has fewer of this gateway's notifications than it acknowledged (restored from a backup?); sending the rest again",
		"acknowledged_id", fmt.Sprint(last), "centre_id", fmt.Sprint(first))
	p.gw.log.waitN(t, 2, "notifications relayed", "mark", fmt.Sprint(last))
	code, _, got := restCall(t, http.DefaultClient, "GET", "http://"+p.centre.rest+"/api/rest/device/cam-1/notification?take=100", deviceREST(t, p.centre, "cam-1"), nil)
	if code != 200 || len(got) != 3 {
		t.Fatalf("cam-1's notifications at the restored centre: %d %v", code, got)
	}
	for i, n := range got {
		if c := n.(map[string]any)["parameters"].(map[string]any)["c"]; c != float64(i+1) {
			t.Fatalf("cam-1's notifications at the restored centre, in order: %v", got)
		}
	}
}

// A gateway put back from a backup by iotsafe restore gives new notifications ids the
// centre has not seen from it (the restore skips the ids it may have given since the
// backup), so they reach the centre; without that the centre would take them for the
// ones it already has.
func TestGatewayRestoredFromABackupStillRelays(t *testing.T) {
	p := startGatewayPairWith(t, "rest: {listen: '127.0.0.1:0'}\n")
	p.gw.addDevice("cam-1")
	first := notify(t, p.gw, "cam-1", deviceREST(t, p.gw, "cam-1"), "temperature", map[string]any{"c": 1})
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(first))
	dir := filepath.Join(t.TempDir(), "gw-backup")
	p.gw.mustCLI("backup", dir)
	second := notify(t, p.gw, "cam-1", deviceREST(t, p.gw, "cam-1"), "temperature", map[string]any{"c": 2})
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(second))

	p.gw.stopKeepingPort()
	p.gw.mustCLI("restore", "--force", dir)
	p.gw.start()
	third := notify(t, p.gw, "cam-1", deviceREST(t, p.gw, "cam-1"), "temperature", map[string]any{"c": 3})
	if third <= second {
		t.Fatalf("the restored gateway gave id %d again (after %d)", third, second)
	}
	p.gw.log.wait(t, "notifications relayed", "mark", fmt.Sprint(third))
	code, _, got := restCall(t, http.DefaultClient, "GET", "http://"+p.centre.rest+"/api/rest/device/cam-1/notification?take=10", deviceREST(t, p.centre, "cam-1"), nil)
	if code != 200 || len(got) != 3 || got[2].(map[string]any)["parameters"].(map[string]any)["c"] != float64(3) {
		t.Fatalf("cam-1's notifications at the centre: %d %v", code, got)
	}
}
