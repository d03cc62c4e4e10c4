package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsClient is a DeviceHive WebSocket API client: requests carry a requestId, answers
// are matched to it, pushes (no requestId) are kept in order.
type wsClient struct {
	t      *testing.T
	conn   *websocket.Conn
	nextID atomic.Int64
	// answers and pushes are filled by the reader; closed carries how the socket ended.
	answers chan map[string]any
	pushes  chan map[string]any
	closed  chan error
}

// dialWS opens a socket to the hub's front door (the gorilla client: a second,
// independent implementation of RFC 6455 beside the Python client's).
func dialWS(t *testing.T, h *hubProc, ca string) (*wsClient, error) {
	t.Helper()
	return dialWSFrom(t, h, ca, "")
}

// dialWSFrom is dialWS from source address src ("" for any).
func dialWSFrom(t *testing.T, h *hubProc, ca, src string) (*wsClient, error) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		t.Fatalf("exported CA is not PEM: %q", ca)
	}
	d := websocket.Dialer{
		TLSClientConfig:  &tls.Config{RootCAs: pool},
		HandshakeTimeout: 30 * time.Second,
		NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := &net.Dialer{}
			if src != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
			}
			return d.DialContext(ctx, network, h.front)
		},
	}
	return dialWSWith(t, &d, "wss://"+fdDomain+":"+portOf(h.front)+"/api/websocket")
}

// dialWSWith opens a socket to url with d.
func dialWSWith(t *testing.T, d *websocket.Dialer, url string) (*wsClient, error) {
	t.Helper()
	conn, resp, err := d.Dial(url, nil)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%w: HTTP %d", err, resp.StatusCode)
		}
		return nil, err
	}
	c := &wsClient{t: t, conn: conn, answers: make(chan map[string]any, 64), pushes: make(chan map[string]any, 1024), closed: make(chan error, 1)}
	t.Cleanup(func() { conn.Close() })
	go c.read()
	return c, nil
}

func (c *wsClient) read() {
	for {
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			c.closed <- err
			close(c.answers)
			close(c.pushes)
			return
		}
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			c.closed <- fmt.Errorf("not JSON: %q", data)
			return
		}
		if _, ok := m["requestId"]; ok {
			c.answers <- m
		} else {
			c.pushes <- m
		}
	}
}

// do sends action with fields and returns the answer (status, and the rest).
func (c *wsClient) do(action string, fields map[string]any) map[string]any {
	c.t.Helper()
	id := fmt.Sprintf("r%d", c.nextID.Add(1))
	m := map[string]any{"action": action, "requestId": id}
	for k, v := range fields {
		m[k] = v
	}
	if err := c.conn.WriteJSON(m); err != nil {
		c.t.Fatalf("%s: write: %v", action, err)
	}
	for a := range c.answers {
		if a["requestId"] == id {
			if a["action"] != action {
				c.t.Fatalf("%s: answered as %v", action, a["action"])
			}
			return a
		}
	}
	c.t.Fatalf("%s: the socket closed before the answer: %v", action, <-c.closed)
	return nil
}

// ok is do that fails the test on an error answer.
func (c *wsClient) ok(action string, fields map[string]any) map[string]any {
	c.t.Helper()
	a := c.do(action, fields)
	if a["status"] != "success" {
		c.t.Fatalf("%s %v: %v", action, fields, a)
	}
	return a
}

// push waits for the next push of action.
func (c *wsClient) push(action string) map[string]any {
	c.t.Helper()
	for p := range c.pushes {
		if p["action"] == action {
			return p
		}
	}
	c.t.Fatalf("waiting for a %s push: the socket closed: %v", action, <-c.closed)
	return nil
}

// closeFrame waits until the socket ends and returns the hub's close frame.
func (c *wsClient) closeFrame() *websocket.CloseError {
	c.t.Helper()
	for range c.pushes { // drain
	}
	err := <-c.closed
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		c.t.Fatalf("the socket ended without a close frame: %v", err)
	}
	return ce
}

// TestWebSocketAPI runs DeviceHive's WebSocket protocol against a real hub: logins and
// authenticate, actions answered by the REST API's rules, subscriptions pushed from the
// store, errors in DeviceHive's form, and the socket of a revoked device closed.
func TestWebSocketAPI(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	h.mustCLI("grant", "--account", "app", "dev1", "+command")
	ca := h.mustCLI("frontdoor", "ca")

	app, err := dialWS(t, h, ca)
	if err != nil {
		t.Fatal(err)
	}
	// Before authenticating: server/info answers, with the socket's URL; the rest is 401.
	info := app.ok("server/info", nil)["info"].(map[string]any)
	if want := "wss://" + fdDomain + ":" + portOf(h.front) + "/api/websocket"; info["webSocketServerUrl"] != want || info["apiVersion"] == nil {
		t.Fatalf("server/info: %v, want webSocketServerUrl %s", info, want)
	}
	if a := app.do("device/list", nil); a["status"] != "error" || a["code"] != 401.0 || !strings.Contains(a["error"].(string), "log in") {
		t.Fatalf("device/list before authenticate: %v", a)
	}
	if a := app.do("authenticate", map[string]any{"token": "not.a.token"}); a["status"] != "error" || a["code"] != 401.0 {
		t.Fatalf("authenticate with a forged token: %v", a)
	}
	toks := app.ok("token", map[string]any{"login": "app", "password": "app-password-1"})
	app.ok("authenticate", map[string]any{"token": toks["accessToken"]})
	if devs := app.ok("device/list", nil)["devices"].([]any); len(devs) != 1 || devs[0].(map[string]any)["id"] != "dev1" {
		t.Fatalf("device/list: %v", devs)
	}
	if a := app.do("device/list", map[string]any{"networkId": 999}); a["status"] != "success" || len(a["devices"].([]any)) != 0 {
		t.Fatalf("device/list by a network nobody has: %v", a)
	}
	if a := app.do("device/get", map[string]any{"deviceId": "nobody"}); a["code"] != 404.0 {
		t.Fatalf("device/get of an unknown device: %v", a)
	}
	if a := app.do("device/fly", nil); a["code"] != 400.0 || !strings.Contains(a["error"].(string), "notification/subscribe") {
		t.Fatalf("an unknown action: %v", a)
	}
	if a := app.do("notification/subscribe", map[string]any{"deviceId": "dev1", "networkId": 1}); a["code"] != 400.0 || !strings.Contains(a["error"].(string), "networkIds") {
		t.Fatalf("subscribe with GET /device's filter: %v", a)
	}
	notes := app.ok("notification/subscribe", map[string]any{"deviceId": "dev1", "names": []string{"temperature"}})["subscriptionId"]
	answers := app.ok("command/subscribe", map[string]any{"deviceId": "dev1", "returnUpdatedCommands": true})["subscriptionId"]

	// The device on a socket of its own: its login, its command subscription.
	dev, err := dialWS(t, h, ca)
	if err != nil {
		t.Fatal(err)
	}
	dtoks := dev.ok("token", map[string]any{"login": "dev1", "password": secret})
	dev.ok("authenticate", map[string]any{"token": dtoks["accessToken"]})
	dev.ok("command/subscribe", nil) // its own commands
	dev.ok("notification/insert", map[string]any{"notification": map[string]any{"notification": "humidity", "parameters": map[string]any{"rh": 40}}})
	dev.ok("notification/insert", map[string]any{"deviceId": "dev1", "notification": map[string]any{"notification": "temperature", "parameters": map[string]any{"c": 21}}})
	p := app.push("notification/insert")
	if n := p["notification"].(map[string]any); p["subscriptionId"] != notes || n["notification"] != "temperature" || n["deviceId"] != "dev1" {
		t.Fatalf("notification push (the humidity one is not subscribed): %v", p)
	}
	// A device writes only its own notifications, whatever the socket asks.
	if a := dev.do("notification/insert", map[string]any{"deviceId": "dev2", "notification": map[string]any{"notification": "x"}}); a["status"] != "error" {
		t.Fatalf("a device writing another's notification: %v", a)
	}

	// A command: the app sends it, the device gets it pushed and answers it, the app gets
	// the answer pushed.
	sent := app.ok("command/insert", map[string]any{"deviceId": "dev1", "command": map[string]any{"command": "open", "parameters": map[string]any{"valve": 2}}})["command"].(map[string]any)
	got := dev.push("command/insert")["command"].(map[string]any)
	if got["id"] != sent["id"] || got["command"] != "open" {
		t.Fatalf("command push: %v, sent %v", got, sent)
	}
	dev.ok("command/update", map[string]any{"commandId": got["id"], "command": map[string]any{"status": "done", "result": map[string]any{"opened": true}}})
	up := app.push("command/update")
	if c := up["command"].(map[string]any); up["subscriptionId"] != answers || c["status"] != "done" || c["id"] != sent["id"] {
		t.Fatalf("command/update push: %v", up)
	}
	app.ok("notification/unsubscribe", map[string]any{"subscriptionId": notes})
	if a := app.do("notification/unsubscribe", map[string]any{"subscriptionId": notes}); a["code"] != 404.0 {
		t.Fatalf("unsubscribe twice: %v", a)
	}

	// Revoking the device closes its socket at once, with the reason.
	h.mustCLI("device", "revoke", "dev1")
	if ce := dev.closeFrame(); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "device dev1") {
		t.Fatalf("the revoked device's socket: %v", ce)
	}
	// The account's socket stays; what it may read of the revoked device is REST's answer.
	app.ok("device/list", nil)
	// Removing the account closes its socket too.
	h.mustCLI("account", "remove", "app")
	if ce := app.closeFrame(); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "account app") {
		t.Fatalf("the removed account's socket: %v", ce)
	}
}

// A device reaches the WebSocket API over its SSH session's direct alias with no
// token: the session proves it. It is pushed its commands, answers them, and its socket
// closes when it is revoked.
func TestWebSocketOverTheDevicesSSHSession(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nrest: {listen: '127.0.0.1:0'}\n")
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: actuator\ndirect: {api: %q}\n", h.rest))
	key := h.addDevice("dev1", "--profile", prof)
	h.addAccount("ctl", "ctl-password-1")
	h.mustCLI("grant", "--account", "ctl", "dev1", "+command")
	fwd := freePort(t)
	a := startAgent(t, h, key, "--forward", fwd+"=api")
	a.stderr.wait(t, "session up")

	dev, err := dialWSWith(t, &websocket.Dialer{HandshakeTimeout: 30 * time.Second}, "ws://"+fwd+"/api/websocket")
	if err != nil {
		t.Fatal(err)
	}
	if info := dev.ok("server/info", nil)["info"].(map[string]any); info["webSocketServerUrl"] != "ws://"+fwd+"/api/websocket" {
		t.Fatalf("server/info over the alias: %v", info)
	}
	dev.ok("command/subscribe", nil)
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	code, sent, _ := restCall(t, c, "POST", api+"/device/dev1/command", basicAuth("ctl", "ctl-password-1"), map[string]any{"command": "open"})
	if code != 201 {
		t.Fatalf("send: %d %v", code, sent)
	}
	got := dev.push("command/insert")["command"].(map[string]any)
	if got["id"] != sent["id"] {
		t.Fatalf("pushed %v, sent %v", got, sent)
	}
	dev.ok("command/update", map[string]any{"commandId": got["id"], "command": map[string]any{"status": "done"}})
	if code, back, _ := restCall(t, c, "GET", fmt.Sprintf("%s/device/dev1/command/%v", api, got["id"]), basicAuth("ctl", "ctl-password-1"), nil); code != 200 || back["status"] != "done" {
		t.Fatalf("the answer, read over REST: %d %v", code, back)
	}
	// Revoking it ends its socket: with the hub's close frame, or with the SSH session
	// that carried it, whichever the hub gets to first.
	h.mustCLI("device", "revoke", "dev1")
	for range dev.pushes {
	}
	var ce *websocket.CloseError
	if err := <-dev.closed; errors.As(err, &ce) && ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("the revoked device's socket over its session: %v", err)
	}
}

// TestWebSocketLimits checks what a socket may cost before and after it authenticates:
// the authentication deadline, the cap per source address, the subscriptions per socket,
// and a plain HTTP request at the path told what it is.
func TestWebSocketLimits(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n"+
		"websocket: {auth_timeout: 2s, max_unauthenticated_per_address: 2, max_subscriptions: 1, max_sockets: 4}\n")
	h.addAccount("app", "app-password-1")
	ca := h.mustCLI("frontdoor", "ca")

	// Two sockets that never authenticate: a third from the address is refused; each
	// is closed at its deadline, saying so.
	var idle []*wsClient
	for i := 0; i < 2; i++ {
		c, err := dialWS(t, h, ca)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	if _, err := dialWS(t, h, ca); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a third unauthenticated socket from one address: %v", err)
	}
	// From another source address the cap is its own.
	code, toks, _ := restCall(t, fdClient(t, h, ca, nil), "POST", "https://"+fdDomain+":"+portOf(h.front)+"/api/rest/token", "", map[string]string{"login": "app", "password": "app-password-1"})
	if code != 201 {
		t.Fatalf("login: %d %v", code, toks)
	}
	other, err := dialWSFrom(t, h, ca, "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	other.ok("authenticate", map[string]any{"token": toks["accessToken"]})
	other.ok("notification/subscribe", nil)
	if a := other.do("command/subscribe", nil); a["code"] != 429.0 || !strings.Contains(a["error"].(string), "websocket.max_subscriptions") {
		t.Fatalf("a second subscription over max_subscriptions 1: %v", a)
	}
	for _, c := range idle {
		if ce := c.closeFrame(); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "authenticate within 2s") {
			t.Errorf("an unauthenticated socket past its deadline: %v", ce)
		}
	}
	// The hub's cap (max_sockets 4) counts the sockets open now: the two closed ones
	// gave their places back.
	for i, src := range []string{"127.0.0.3", "127.0.0.3", "127.0.0.5"} {
		if _, err := dialWSFrom(t, h, ca, src); err != nil {
			t.Fatalf("socket %d of 4: %v", i+2, err)
		}
	}
	if _, err := dialWSFrom(t, h, ca, "127.0.0.4"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a fifth socket over max_sockets 4: %v", err)
	}
	// Not a WebSocket request: 426 and how to connect.
	c := fdClient(t, h, ca, nil)
	resp, err := c.Get("https://" + fdDomain + ":" + portOf(h.front) + "/api/websocket")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("GET without upgrade: %d", resp.StatusCode)
	}
}

// dhClientScript is a platform app and a device on DeviceHive's Python client, both
// over the URL it is given (wss:// or https://), as its README writes them: Handler
// subclasses, subscriptions made in handle_connect, commands answered with
// Command.save(). argv: URL, the front door's name, dev1's secret.
const dhClientScript = `
import os, queue, socket, sys, threading, time
real = socket.getaddrinfo
def resolve(host, *a, **k):  # the front door's name, without DNS
    return real("127.0.0.1" if host == sys.argv[2] else host, *a, **k)
socket.getaddrinfo = resolve
from devicehive import DeviceHive, Handler

url, secret = sys.argv[1], sys.argv[3]
notes, updates = queue.Queue(), queue.Queue()
app_ready, dev_ready = threading.Event(), threading.Event()

class App(Handler):
    def handle_connect(self):
        d = self.api.put_device("dev1")  # DeviceHive's register-or-update; dev1 is enrolled
        net = self.api.create_network("plant-a", "the first plant")
        new = self.api.put_device("dev2", data={"site": "a"}, network_id=net.id)  # registered by the app
        assert new.id == "dev2" and new.data == {"site": "a"} and not new.is_blocked and new.network_id == net.id, vars(new)
        assert [x.id for x in self.api.list_devices(network_id=net.id)] == ["dev2"]
        assert [(n.id, n.name) for n in self.api.list_networks()] == [(net.id, "plant-a")]
        d.subscribe_notifications(names=["temperature", "answered"])
        d.subscribe_update_commands()
        app_ready.set()
    def handle_notification(self, n):
        notes.put(n)
    def handle_command_update(self, c):
        updates.put(c)

class Dev(Handler):
    def handle_connect(self):
        self.device = self.api.get_device("dev1")
        self.device.subscribe_insert_commands()
        dev_ready.set()
    def handle_command_insert(self, c):
        c.status = "done"
        c.result = {"valve": c.parameters["valve"]}
        c.save()
        self.device.send_notification("answered", parameters={"command": c.id})

app, dev = DeviceHive(App), DeviceHive(Dev)
threading.Thread(target=app.connect, args=(url,), kwargs=dict(login="app", password="app-password-1"), daemon=True).start()
dev.connect(url, login="dev1", password=secret, transport_keep_alive=False)
assert app_ready.wait(60) and dev_ready.wait(60), "handlers did not connect"
api = app.handler.api

dev.handler.device.send_notification("temperature", parameters={"c": 21})
n = notes.get(timeout=60)
assert n.notification == "temperature" and n.parameters == {"c": 21} and n.device_id == "dev1", vars(n)

sent = api.send_command("dev1", "open", parameters={"valve": 2})
u = updates.get(timeout=60)
assert u.id == sent.id and u.status == "done" and u.result == {"valve": 2}, vars(u)
a = notes.get(timeout=60)
assert a.notification == "answered" and a.parameters == {"command": sent.id}, vars(a)

# The access token (jwt.access_ttl 1s, with the hub's 2 s leeway for clock skew)
# expires: waiting for a clock, not for readiness. The client refreshes it over the
# socket (token/refresh, then authenticate) on the 401 and goes on.
before = api.token.access_token
time.sleep(5)
assert sorted(d.id for d in api.list_devices()) == ["dev1", "dev2"]
assert api.token.access_token != before, "the token was not refreshed"

if url.startswith("wss:"):
    # The client reads each socket on a thread of its own, which ends on the hub's close
    # frame (and nothing else of the client notices): the revoked device's goes.
    def readers():
        return sum(1 for t in threading.enumerate() if t.name == "websocket-transport-event")
    assert readers() == 2, readers()
    print("ready-for-revoke", file=sys.stderr, flush=True)
    deadline = time.time() + 60  # a failure guard
    while readers() > 1 and time.time() < deadline:
        time.sleep(0.05)
    assert readers() == 1, "the revoked device's socket stayed open"
else:
    # Over HTTPS each call is a request of its own: the revoked device's next is refused.
    print("ready-for-revoke", file=sys.stderr, flush=True)
    input()  # the test revokes it, then says so
    try:
        dev.handler.device.send_notification("late")
        raise SystemExit("the revoked device still sends")
    except Exception as e:
        assert "401" in str(e) and "revoked" in str(e), e
print("devicehive ok", flush=True)
`

// TestDeviceHivePythonClientOverWebSocket runs DeviceHive's Python client (PyPI
// 'devicehive'), unchanged, over wss://: an app makes a network and registers a device
// into it, an app and a device subscribe, a notification
// and a command's answer are pushed, an expired token is refreshed on the socket, and
// the revoked device's socket is closed by the hub.
func TestDeviceHivePythonClientOverWebSocket(t *testing.T) {
	py := venvTool(t, "python")
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\njwt: {access_ttl: 1s}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "@all", "+manage") // it registers dev2
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, []byte(h.mustCLI("frontdoor", "ca")), 0o644)

	url := "wss://" + fdDomain + ":" + portOf(h.front) + "/api/websocket"
	p := startProcEnv(t, []string{"WEBSOCKET_CLIENT_CA_BUNDLE=" + caFile}, py, "-c", dhClientScript, url, fdDomain, secret)
	p.stderr.waitText(t, "ready-for-revoke")
	h.mustCLI("device", "revoke", "dev1")
	if code := p.waitExit(t); code != 0 || !strings.Contains(p.out.String(), "devicehive ok") {
		t.Fatalf("devicehive client over wss: exit %d\n%s\n%s", code, p.out.String(), p.stderr.text())
	}
	h.log.wait(t, "socket closed: its caller's access ended", "caller", "device dev1")
}

// The same workflows of DeviceHive's Python client over https:// (its HTTP transport:
// subscriptions as long polls), on the same hub code: the app makes a network and
// registers a device, notifications and a command's answer reach it, tokens are
// refreshed across expiry, and the revoked device's next call is refused.
func TestDeviceHivePythonClientOverHTTPS(t *testing.T) {
	py := venvTool(t, "python")
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\njwt: {access_ttl: 1s}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "@all", "+manage")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, []byte(h.mustCLI("frontdoor", "ca")), 0o644)

	url := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	cmd := exec.Command(py, "-c", dhClientScript, url, fdDomain, secret)
	cmd.Env = append(os.Environ(), "REQUESTS_CA_BUNDLE="+caFile)
	stdin, _ := cmd.StdinPipe()
	var out bytes.Buffer
	cmd.Stdout = &out
	errs := startWatched(t, cmd)
	errs.waitText(t, "ready-for-revoke")
	h.mustCLI("device", "revoke", "dev1")
	fmt.Fprintln(stdin)
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "devicehive ok") {
		t.Fatalf("devicehive client over https: %v\n%s\n%s", err, out.String(), errs.text())
	}
}

// A socket whose client stops reading is closed once a push cannot be written within
// websocket.write_timeout, and logged: the hub keeps no queue for it, and the device
// storing notifications is not slowed.
func TestWebSocketClientThatDoesNotRead(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n"+
		"websocket: {write_timeout: 1s}\ntelemetry: {device_rate: 10000, device_burst: 10000, device_bytes_rate: 1GiB}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	ca := h.mustCLI("frontdoor", "ca")
	c := fdClient(t, h, ca, nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	_, toks, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": "app", "password": "app-password-1"})
	_, dtoks, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": secret})

	// A client with a small receive buffer that subscribes, then reads nothing more.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(ca))
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: pool}, NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, h.front)
		if err == nil {
			conn.(*net.TCPConn).SetReadBuffer(4096)
		}
		return conn, err
	}}
	conn, _, err := d.Dial("wss://"+fdDomain+":"+portOf(h.front)+"/api/websocket", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, m := range []map[string]any{{"action": "authenticate", "requestId": 1, "token": toks["accessToken"]}, {"action": "notification/subscribe", "requestId": 2, "deviceId": "dev1"}} {
		var a map[string]any
		if err := conn.WriteJSON(m); err != nil || conn.ReadJSON(&a) != nil || a["status"] != "success" {
			t.Fatalf("%v: %v %v", m["action"], a, err)
		}
	}
	closed := h.log.seen("socket closed: it does not read what it is sent", "caller", "account app")
	big := strings.Repeat("x", 60<<10)
	for i := 0; ; i++ {
		select {
		case <-closed:
			// The device went on storing throughout.
			if code, e, _ := restCall(t, c, "POST", api+"/device/dev1/notification", "Bearer "+dtoks["accessToken"].(string), map[string]any{"notification": "after"}); code != 201 {
				t.Fatalf("the device after the slow socket closed: %d %v", code, e)
			}
			return
		default:
		}
		if i == 2000 { // 120 MB: far past any socket buffer; a failure guard
			t.Fatal("the socket that does not read was never closed")
		}
		if code, e, _ := restCall(t, c, "POST", api+"/device/dev1/notification", "Bearer "+dtoks["accessToken"].(string), map[string]any{"notification": "big", "parameters": map[string]string{"x": big}}); code != 201 {
			t.Fatalf("notification %d: %d %v", i, code, e)
		}
	}
}
