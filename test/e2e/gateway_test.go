package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// restartOnSamePort stops the hub and starts it again on its data folder, its SSH
// server on the address it had (devices and gateways dial that address again).
func (h *hubProc) restartOnSamePort() {
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
	h.start()
}

// gatewayPair is a central hub and a gateway hub relaying to it (paper 000's three
// levels), both real 'iotsafe hub' processes on loopback with pools of their own.
type gatewayPair struct {
	centre, gw *hubProc
}

// startGatewayPair enrols gateway gw1 at a fresh centre with a gateway profile whose
// devices must be named cam-* (at most 3), and starts the gateway hub with the key.
func startGatewayPair(t *testing.T) gatewayPair {
	t.Helper()
	centre := startHub(t, "", "")
	prof := filepath.Join(t.TempDir(), "site-gw.yaml")
	if err := os.WriteFile(prof, []byte("name: site-gw\ngateway: {max_devices: 3, devices: ['cam-*']}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := centre.addDevice("gw1", "--profile", prof)
	gw := startHub(t, "", fmt.Sprintf("upstream:\n  hub: %s\n  hub_key: %s\n  name: gw1\n  key: %s\n", centre.addr, centre.hostFP, key))
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
