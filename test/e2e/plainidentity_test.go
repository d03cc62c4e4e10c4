package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
)

// runAs runs argv as uid (its own gid, no other groups), inside namespace ns if given.
func runAs(t *testing.T, ns string, uid int, argv ...string) (string, error) {
	t.Helper()
	cmd := []string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups"}
	if ns != "" {
		cmd = append([]string{"ip", "netns", "exec", ns}, cmd...)
	}
	out, err := exec.Command(cmd[0], append(cmd[1:], argv...)...).CombinedOutput()
	return string(out), err
}

// curlFrom is curl's answer (the body, then the status code on a line of its own) to a
// request sent as uid from source.
func curlFrom(t *testing.T, ns string, uid int, source, method, url, body string) (string, error) {
	args := []string{needTool(t, "curl"), "-sS", "--max-time", "20", "--interface", source, "-X", method, "-w", "\n%{http_code}", url}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "--data", body)
	}
	return runAs(t, ns, uid, args...)
}

// A local user who binds a device's pool address is no device on the hub's plain
// listeners (issue 48, item 1): REST, SOAP and MQTT refuse it and charge the device
// nothing, while the device itself, over its SSH session, still needs no token. With
// the kernel layer off, the hub's user-space check refuses (the connection is not one
// the hub opened); with it on, the kernel refuses the connection before the hub sees it.
func TestPlainListenersTrustSessionsOnly(t *testing.T) {
	needRoot(t)
	t.Run("user-space layer", func(t *testing.T) { testPlainIdentity(t, "") })
	t.Run("kernel layer", func(t *testing.T) { testPlainIdentity(t, netns(t)) })
}

func testPlainIdentity(t *testing.T, ns string) {
	const stranger = 1003
	extra := "rest: {listen: '127.0.0.1:0'}\nsoap: {enabled: true}\nmqtt: {listen: '127.0.0.1:0'}\n"
	var setup func(*hubProc)
	if ns != "" {
		extra += "access: {kernel: on}\n"
		setup = inNetnsWithUserDB(ns)
	} else {
		extra += "frontdoor: {listen: '127.0.0.1:0', domain: " + fdDomain + "}\n"
	}
	h := startHubWith(t, "", extra, setup)
	reachable(t, h.data)
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\ndirect: {api: %q, broker: %q}\non_violation: {action: revoke, after: 1}\n", h.rest, h.mqtt))
	key1 := h.addDevice("dev1", "--profile", prof)
	h.addDevice("dev4", "--profile", prof)
	dev1, dev4 := h.device("dev1").Address, h.device("dev4").Address

	if ns == "" {
		// dev1 has a command waiting that only dev1 may read.
		h.addAccount("ctl", "ctl-password-1")
		h.mustCLI("grant", "--account", "ctl", "dev1", "+command")
		c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
		api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
		if code, body, _ := restCall(t, c, "POST", api+"/device/dev1/command", basicAuth("ctl", "ctl-password-1"),
			map[string]any{"command": "unlock", "parameters": map[string]any{"pin": "4711"}}); code != 201 {
			t.Fatalf("queue a command: %d %v", code, body)
		}
	}

	rest := "http://" + h.rest + "/api/rest"
	for _, tc := range []struct{ what, source, method, path, body string }{
		{"read dev1's commands", dev1, "GET", "/device/dev1/command?take=10", ""},
		{"poll dev1's commands", dev1, "GET", "/device/dev1/command/poll?waitTimeout=0", ""},
		{"post as dev1", dev1, "POST", "/device/dev1/notification", `{"notification":"forged"}`},
		{"set dev1's data", dev1, "PUT", "/device/dev1", `{"data":{"owned":true}}`},
		{"read dev1", dev1, "GET", "/device/dev1", ""},
	} {
		out, err := curlFrom(t, ns, stranger, tc.source, tc.method, rest+tc.path, tc.body)
		switch {
		case ns != "" && (err == nil || !strings.Contains(out, "Failed to connect")):
			t.Errorf("%s: the kernel layer let a stranger send from a pool address: %v %s", tc.what, err, out)
		case ns == "" && (err != nil || !strings.HasSuffix(strings.TrimSpace(out), "\n401") || strings.Contains(out, "4711")):
			t.Errorf("%s as a stranger from dev1's address: %v %s (want 401)", tc.what, err, out)
		}
	}
	// SOAP on the same listener: junk from dev4's address is refused, and is not dev4's.
	soapOut, err := runAs(t, ns, stranger, needTool(t, "curl"), "-sS", "--max-time", "20", "--interface", dev4, "-H", "Content-Type: application/soap+xml",
		"--data", "<s:Envelope xmlns:s='http://www.w3.org/2003/05/soap-envelope'><s:Body/></s:Envelope>", "-w", "\n%{http_code}", "http://"+h.rest+"/soap")
	if ns == "" && (err != nil || !strings.Contains(soapOut, "s:Fault")) || ns != "" && !strings.Contains(soapOut, "Failed to connect") {
		t.Errorf("SOAP as a stranger from dev4's address: %v %s", err, soapOut)
	}
	// MQTT: the stranger cannot log in as dev4, so it can neither read dev4's topics nor
	// run dev4 into its on_violation with refused subscriptions.
	host, port := splitHostPort(t, h.mqtt)
	for range 3 {
		out, err := runAs(t, ns, stranger, needTool(t, "mosquitto_sub"), "-h", host, "-p", port, "-A", dev4, "-i", "dev4", "-V", "mqttv311",
			"-t", "devices/dev4/#", "-t", "devices/dev1/#", "-C", "1", "-W", "5")
		if err == nil || ns == "" && !strings.Contains(strings.ToLower(out), "not authori") {
			t.Errorf("MQTT as a stranger from dev4's address: %v %s", err, out)
		}
	}
	for _, d := range []string{"dev1", "dev4"} {
		if got := h.device(d); got.Violations != 0 || got.Revoked != nil {
			t.Fatalf("%s was charged for a stranger's tries: %+v", d, got)
		}
	}
	if ns == "" {
		if ev := h.events("", "mqtt_auth_refused"); len(ev) == 0 || !strings.Contains(fmt.Sprint(ev), "not one the hub opened") {
			t.Errorf("the refused MQTT login is not audited with its reason: %v", ev)
		}
	}

	// The device, over its own session, is known without a token on both paths.
	fwd, mqttFwd := freePort(t), freePort(t)
	agent := []string{iotsafeBin, "agent", "--hub", h.addr, "--key", key1, "--hub-key", h.hostFP, "--log-format", "json",
		"--forward", fwd + "=api", "--forward", mqttFwd + "=broker"}
	if ns != "" {
		agent = append([]string{"ip", "netns", "exec", ns}, agent...)
	}
	a := startProc(t, agent[0], agent[1:]...)
	a.stderr.wait(t, "session up")
	out, err := runAs(t, ns, 0, needTool(t, "curl"), "-sS", "--max-time", "20", "-H", "Content-Type: application/json",
		"--data", `{"notification":"hello"}`, "-w", "\n%{http_code}", "http://"+fwd+"/api/rest/device/dev1/notification")
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "\n201") {
		t.Fatalf("dev1 over its session without a token: %v %s", err, out)
	}
	fh, fp := splitHostPort(t, mqttFwd)
	if out, err := runAs(t, ns, 0, needTool(t, "mosquitto_pub"), "-h", fh, "-p", fp, "-i", "dev1", "-q", "1",
		"-t", "devices/dev1/notifications/temp", "-m", "21"); err != nil {
		t.Fatalf("dev1's MQTT over its session: %v %s", err, out)
	}
	if ns == "" {
		h.log.wait(t, "mqtt client connected", "device", "dev1", "listener", "session")
	}
}

func splitHostPort(t *testing.T, hostport string) (string, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}
