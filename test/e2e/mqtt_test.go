package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/iotsafe/iotsafe/internal/childproc"
)

// mosq runs a Mosquitto client (mosquitto_pub or mosquitto_sub) with args and returns its
// output and error.
func mosq(t *testing.T, tool string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, needTool(t, tool), args...).CombinedOutput()
	return string(out), err
}

// startSub runs mosquitto_sub with its messages and -d's protocol trace (both on its
// standard output) watched; the channel closes when it exits.
func startSub(t *testing.T, args ...string) (*logWatch, <-chan struct{}) {
	t.Helper()
	pr, pw := io.Pipe()
	// Line-buffered: into a pipe its standard output would wait for a full buffer.
	cmd := exec.Command(needTool(t, "stdbuf"), append([]string{"-oL", needTool(t, "mosquitto_sub")}, args...)...)
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := childproc.Start(cmd); err != nil {
		t.Fatal(err)
	}
	w := newLogWatch(pr)
	exited := make(chan struct{})
	// exited is closed once the last line is in w, not merely once the process is gone.
	go func() { cmd.Wait(); pw.Close(); w.drained(10 * time.Second); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return w, exited
}

// The hub's MQTT broker with real Mosquitto clients: a device logs in over TLS with its
// name and telemetry secret, publishes, and its message is stored as a notification that
// the REST API's reader sees; a device over its SSH session is known by its pool address
// on the plain listener; wrong secrets, other devices' topics and strangers on the plain
// listener are refused and audited; a revoked device's client is disconnected at once.
func TestMQTT(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {listen: '127.0.0.1:0', tls_listen: '127.0.0.1:0'}\nmetrics: {listen: '127.0.0.1:0'}\n")
	if h.mqtt == "" || h.mqttTLS == "" {
		t.Fatalf("no MQTT listeners in the ready file; log:\n%s", h.log.text())
	}
	h.addDevice("dev1")
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\ndirect: {broker: %q}\n", h.mqtt))
	key3 := h.addDevice("dev3", "--profile", prof)
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	// The certificate names the front door's domain; Mosquitto has no --resolve, so the
	// chain is checked against the hub's CA and the host name check is off (--insecure).
	tlsArgs := func(user, pw string) []string {
		return []string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", user, "-P", pw, "-V", "mqttv5"}
	}
	// MQTT 3.1.1 for the wrong secret: Debian's mosquitto_pub 2.0.11 aborts on an MQTT 5
	// refusal (after printing it), a client bug.
	tls311 := func(user, pw string) []string {
		return []string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", user, "-P", pw, "-V", "mqttv311"}
	}

	// A subscriber of dev1's own topics, then a QoS 1 publish: delivered and stored.
	sub, subExited := startSub(t, append(tlsArgs("dev1", secret), "-t", "devices/dev1/#", "-v", "-d")...)
	sub.waitText(t, "received SUBACK")
	// The operator sees the subscriber by device: listener, MQTT version, TLS, its one
	// subscription; a device without clients has none, and the table names its columns.
	var clients []struct {
		ClientID, Device, Listener, MQTT, TLS string
		Subscriptions                         int
	}
	if err := json.Unmarshal([]byte(h.mustCLIStdout("mqtt", "clients", "-o", "json")), &clients); err != nil || len(clients) != 1 {
		t.Fatalf("mqtt clients: %v %+v", err, clients)
	}
	if c := clients[0]; c.Device != "dev1" || c.Listener != "tls" || c.MQTT != "5" || !strings.HasPrefix(c.TLS, "TLS 1.3 TLS_") || c.Subscriptions != 1 {
		t.Fatalf("mqtt clients: %+v", c)
	}
	if out := h.mustCLIStdout("mqtt", "clients", "dev3"); !strings.Contains(out, "no client of dev3 is connected") {
		t.Fatalf("mqtt clients dev3: %s", out)
	}
	if out := h.mustCLIStdout("mqtt", "clients", "dev1"); !strings.Contains(out, "CLIENT ID") || !strings.Contains(out, "dev1") {
		t.Fatalf("mqtt clients dev1: %s", out)
	}
	if out, err := mosq(t, "mosquitto_pub", append(tlsArgs("dev1", secret), "-t", "devices/dev1/notifications/temperature", "-m", `{"c":21.5}`, "-q", "1")...); err != nil {
		t.Fatalf("publish over TLS: %v\n%s", err, out)
	}
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	h.mustCLI("grant", "--account", "app", "dev3", "+telemetry")
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	code, toks, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": "app", "password": "app-password-1"})
	if code != 201 {
		t.Fatalf("account login: %d %v", code, toks)
	}
	bearer := "Bearer " + toks["accessToken"].(string)
	notes := func(device string) []any {
		code, _, list := restCall(t, c, "GET", api+"/device/"+device+"/notification", bearer, nil)
		if code != 200 {
			t.Fatalf("list %s's notifications: %d", device, code)
		}
		return list
	}
	list := notes("dev1")
	if len(list) != 1 {
		t.Fatalf("dev1's notifications: %v", list)
	}
	if n := list[0].(map[string]any); n["notification"] != "temperature" || fmt.Sprint(n["parameters"]) != "map[c:21.5]" {
		t.Fatalf("stored notification %v", n)
	}

	// Refusals: a wrong secret, another device's topics, a stranger on the plain listener.
	if out, err := mosq(t, "mosquitto_pub", append(tls311("dev1", secret+"x"), "-t", "devices/dev1/x", "-m", "x")...); err == nil || !strings.Contains(out, "not authorised") {
		t.Fatalf("wrong secret: %v\n%s", err, out)
	}
	if out, _ := mosq(t, "mosquitto_sub", append(tlsArgs("dev1", secret), "-t", "devices/dev3/#", "-C", "1")...); !strings.Contains(out, "All subscription requests were denied") {
		t.Fatalf("subscribing to dev3's topics:\n%s", out)
	}
	if out, _ := mosq(t, "mosquitto_pub", append(tlsArgs("dev1", secret), "-t", "devices/dev3/notifications/fake", "-m", "x", "-q", "1")...); !strings.Contains(out, "Not authorized") {
		t.Fatalf("publishing to dev3's topics:\n%s", out)
	}
	// A will is published by the broker on the client's behalf: its topic is checked at
	// CONNECT.
	if out, err := mosq(t, "mosquitto_pub", append(tls311("dev1", secret), "--will-topic", "devices/dev3/notifications/fake", "--will-payload", "x",
		"-t", "devices/dev1/ok", "-m", "x")...); err == nil || !strings.Contains(out, "not authorised") {
		t.Fatalf("a will on dev3's topic: %v\n%s", err, out)
	}
	if out, err := mosq(t, "mosquitto_pub", "-h", "127.0.0.1", "-p", portOf(h.mqtt), "-t", "devices/dev3/x", "-m", "x"); err == nil {
		t.Fatalf("a stranger on the plain listener was served:\n%s", out)
	}
	// A packet over mqtt.max_packet (256 KiB) ends its client's connection, unstored.
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, []byte(strings.Repeat("x", 300<<10)), 0o600)
	if out, err := mosq(t, "mosquitto_pub", append(tls311("dev1", secret), "-t", "devices/dev1/notifications/big", "-f", big, "-q", "1")...); err == nil {
		t.Fatalf("a 300 KiB packet was taken:\n%s", out)
	}
	if n := len(notes("dev1")); n != 1 {
		t.Fatalf("dev1 has %d notifications after the refusals, want the first one only", n)
	}
	// The wrong secret is an audited refusal; what dev1 did against its rules (a
	// subscription, a publish and a will outside its topics, another's client id) are
	// violations of its profile, counted as over SSH.
	if out, err := mosq(t, "mosquitto_pub", append(tls311("dev1", secret), "-i", "dev3", "-t", "devices/dev1/x", "-m", "x")...); err == nil || !strings.Contains(out, "not authorised") {
		t.Fatalf("dev1 with dev3's client id: %v\n%s", err, out)
	}
	if len(h.events("", "mqtt_auth_refused")) == 0 {
		t.Error("no mqtt_auth_refused event in the audit log")
	}
	if d := h.device("dev1"); d.Violations < 4 || len(h.events("dev1", "violation")) == 0 {
		t.Errorf("dev1 has %d violations recorded, want at least 4", d.Violations)
	}
	// A refused QoS 1 publish of a $ topic over MQTT 3.1.1 closes the connection (there
	// is no negative PUBACK), and the violation says so (issue 54.5); MQTT 5 is answered.
	if out, err := mosq(t, "mosquitto_pub", append(tls311("dev1", secret), "-t", "$private/x", "-m", "x", "-q", "1")...); err == nil {
		t.Fatalf("a refused QoS 1 publish of $private/x over 3.1.1 kept its connection:\n%s", out)
	}
	if out, _ := mosq(t, "mosquitto_pub", append(tlsArgs("dev1", secret), "-t", "$private/y", "-m", "x", "-q", "1")...); !strings.Contains(out, "Not authorized") {
		t.Fatalf("MQTT 5 publish of $private/y: %s", out)
	}
	var said311, said5 bool
	for _, e := range h.events("dev1", "violation") {
		said311 = said311 || strings.Contains(e.Detail, "publish to $private/x") && strings.Contains(e.Detail, "MQTT 3.1.1: at QoS 1 or 2 the connection is closed")
		said5 = said5 || strings.Contains(e.Detail, "publish to $private/y") && strings.Contains(e.Detail, "MQTT 5: answered 'not authorized', connection kept")
	}
	if !said311 || !said5 {
		t.Errorf("the violations do not say what happened to the connection: %+v", h.events("dev1", "violation"))
	}
	// One connection's refusals are bounded (mqtt.max_refusals, 32): past them the client
	// is disconnected and nothing more is counted.
	h.addDevice("dev5")
	secret5 := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev5"))
	many := tlsArgs("dev5", secret5)
	for i := range 40 {
		many = append(many, "-t", fmt.Sprintf("devices/dev1/t%d", i))
	}
	mosq(t, "mosquitto_sub", append(many, "-C", "1")...)
	h.log.wait(t, "an MQTT client passed its refusal budget; disconnecting it", "device", "dev5")
	if v := h.device("dev5").Violations; v != 32 {
		t.Errorf("dev5 has %d violations after 40 refused topics on one connection, want 32", v)
	}
	// A profile that revokes at the first violation does so for an MQTT one too.
	strict := writeProfile(t, t.TempDir(), "name: strict\non_violation: {action: revoke, after: 1}\n")
	h.addDevice("dev4", "--profile", strict)
	secret4 := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev4"))
	mosq(t, "mosquitto_sub", append(tlsArgs("dev4", secret4), "-t", "devices/dev1/#", "-C", "1")...)
	h.log.wait(t, "device revoked", "device", "dev4")
	if len(notes("dev3")) != 0 {
		t.Fatal("a refused message was stored")
	}

	// dev3 over its SSH session: the agent's direct forward to the plain listener, no
	// credentials; the hub knows it by its pool address.
	local := freePort(t)
	agent := startAgent(t, h, key3, "--forward", local+"=broker")
	agent.stderr.wait(t, "session up")
	if out, err := mosq(t, "mosquitto_pub", "-h", "127.0.0.1", "-p", portOf(local), "-t", "devices/dev3/notifications/hello", "-m", "from the SSH path", "-q", "1"); err != nil {
		t.Fatalf("publish over the SSH session: %v\n%s", err, out)
	}
	if list := notes("dev3"); len(list) != 1 || fmt.Sprint(list[0].(map[string]any)["parameters"]) != "map[payload:from the SSH path]" {
		t.Fatalf("dev3's notifications: %v", list)
	}

	// Revoking dev1 disconnects its subscriber at once (it received the message first).
	h.mustCLI("device", "revoke", "dev1", "--reason", "lost")
	select {
	case <-subExited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the revoked device's subscriber is still connected:\n%s", sub.text())
	}
	if out := sub.text(); !strings.Contains(out, `devices/dev1/notifications/temperature {"c":21.5}`) {
		t.Fatalf("the subscriber did not get the message:\n%s", out)
	}
	h.log.wait(t, "disconnecting a device's MQTT client", "device", "dev1", "why", "revoked")

	// The broker's metrics: what was stored and refused.
	resp, err := http.Get("http://" + h.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"iotsafe_mqtt_stored_total 2", "iotsafe_mqtt_auth_refused_total ", "iotsafe_mqtt_topic_refused_total ", "iotsafe_mqtt_clients "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(string(body), "iotsafe_mqtt_auth_refused_total 0") || strings.Contains(string(body), "iotsafe_mqtt_topic_refused_total 0") {
		t.Errorf("refusals not counted:\n%s", grepLines(string(body), "iotsafe_mqtt_"))
	}
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A device's persistent session and the QoS 1 message waiting in it survive a hub
// restart: the subscription is made, its client goes away, a message arrives for it, the
// hub restarts, and the client reconnecting with the same identifier gets the message.
func TestMQTTSessionSurvivesRestart(t *testing.T) {
	port := freePort(t) // the same address before and after the restart
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '"+port+"'}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	args := func(more ...string) []string {
		return append([]string{"-h", "127.0.0.1", "-p", portOf(port), "--cafile", ca, "--insecure", "-u", "dev1", "-P", secret, "-V", "mqttv311"}, more...)
	}
	persistent := []string{"-c", "-i", "dev1", "-q", "1", "-t", "devices/dev1/commands/#"}
	if out, err := mosq(t, "mosquitto_sub", args(append(persistent, "-E")...)...); err != nil {
		t.Fatalf("persistent subscription: %v\n%s", err, out)
	}
	if out, err := mosq(t, "mosquitto_pub", args("-i", "dev1/app", "-q", "1", "-t", "devices/dev1/commands/reboot", "-m", "at 3am")...); err != nil {
		t.Fatalf("publish while the subscriber is away: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(h.data, "mqtt.db")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("session store: %v %v", err, fi)
	}
	h.stop()
	h.start()
	out, err := mosq(t, "mosquitto_sub", args(append(persistent, "-C", "1", "-v")...)...)
	if err != nil || !strings.Contains(out, "devices/dev1/commands/reboot at 3am") {
		t.Fatalf("after the restart the session did not deliver the waiting message: %v\n%s", err, out)
	}
	// The message restored from the session store and acknowledged after the restart is
	// no longer in flight, and the count never goes below zero (issue 54.4: mochi
	// counted it out without having counted it in).
	var st struct {
		MQTT struct{ Inflight int64 } `json:"mqtt"`
	}
	if err := json.Unmarshal([]byte(h.mustCLIStdout("mqtt", "status", "-o", "json")), &st); err != nil || st.MQTT.Inflight < 0 {
		t.Fatalf("mqtt status after the restart: %v, in flight %d", err, st.MQTT.Inflight)
	}
}

// Removing a device drops its persistent MQTT session (subscriptions, waiting messages,
// stored records): nothing is kept for a device that is gone. Another device's session
// is untouched.
func TestMQTTRemovedDeviceSessionDropped(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	for _, dev := range []string{"dev1", "dev2"} {
		h.addDevice(dev)
		secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", dev))
		args := func(more ...string) []string {
			return append([]string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", dev, "-P", secret, "-V", "mqttv311"}, more...)
		}
		if out, err := mosq(t, "mosquitto_sub", args("-c", "-i", dev, "-q", "1", "-t", "devices/"+dev+"/commands/#", "-E")...); err != nil {
			t.Fatalf("%s's persistent subscription: %v\n%s", dev, err, out)
		}
		if out, err := mosq(t, "mosquitto_pub", args("-i", dev+"/app", "-q", "1", "-t", "devices/"+dev+"/commands/reboot", "-m", "later")...); err != nil {
			t.Fatalf("publish for %s while away: %v\n%s", dev, err, out)
		}
	}
	h.mustCLI("device", "remove", "dev1")
	h.log.wait(t, "dropped the MQTT session of a removed or revoked device", "client", "dev1")
	h.stop()
	db, err := bbolt.Open(filepath.Join(h.data, "mqtt.db"), 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var dev1, dev2 int
	db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				switch {
				case strings.Contains(string(k)+string(v), `dev1`):
					dev1++
				case strings.Contains(string(k)+string(v), `dev2`):
					dev2++
				}
				return nil
			})
		})
	})
	if dev1 != 0 || dev2 == 0 {
		t.Fatalf("session store after removing dev1: %d records of dev1 (want none), %d of dev2 (want its session)", dev1, dev2)
	}
}

// A platform app logs in to the broker as a front-door account: it reads the devices its
// grants cover (a wildcard subscription is filtered message by message), publishes
// commands only to devices it manages, and is refused (and audited) otherwise.
func TestMQTTPlatformApp(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	conn := func(user, pw, version string, more ...string) []string {
		return append([]string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", user, "-P", pw, "-V", version}, more...)
	}
	secrets := map[string]string{}
	for _, dev := range []string{"dev1", "dev2"} {
		h.addDevice(dev)
		secrets[dev] = strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", dev))
	}
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+manage") // reads dev1 and sends it commands; nothing on dev2

	app, appExited := startSub(t, conn("app", "app-password-1", "mqttv5", "-i", "app:app", "-t", "devices/+/notifications/#", "-v", "-d")...)
	app.waitText(t, "received SUBACK")
	if out, err := mosq(t, "mosquitto_pub", conn("dev2", secrets["dev2"], "mqttv5", "-q", "1", "-t", "devices/dev2/notifications/t", "-m", "not-for-app")...); err != nil {
		t.Fatalf("dev2 publish: %v\n%s", err, out)
	}
	if out, err := mosq(t, "mosquitto_pub", conn("dev1", secrets["dev1"], "mqttv5", "-q", "1", "-t", "devices/dev1/notifications/t", "-m", "for-app")...); err != nil {
		t.Fatalf("dev1 publish: %v\n%s", err, out)
	}
	app.waitText(t, "devices/dev1/notifications/t for-app")
	if strings.Contains(app.text(), "not-for-app") {
		t.Fatalf("the app read dev2, which it holds no grant on:\n%s", app.text())
	}

	// Subscribing to dev2 by name is refused; so is a command to dev2; one to dev1 arrives.
	if out, _ := mosq(t, "mosquitto_sub", conn("app", "app-password-1", "mqttv5", "-t", "devices/dev2/#", "-C", "1")...); !strings.Contains(out, "All subscription requests were denied") {
		t.Fatalf("subscribing to dev2:\n%s", out)
	}
	dev1, _ := startSub(t, conn("dev1", secrets["dev1"], "mqttv5", "-t", "devices/dev1/commands/#", "-v", "-d")...)
	dev1.waitText(t, "received SUBACK")
	if out, _ := mosq(t, "mosquitto_pub", conn("app", "app-password-1", "mqttv5", "-q", "1", "-t", "devices/dev2/commands/reboot", "-m", "x")...); !strings.Contains(out, "Not authorized") {
		t.Fatalf("a command to dev2:\n%s", out)
	}
	if out, err := mosq(t, "mosquitto_pub", conn("app", "app-password-1", "mqttv5", "-q", "1", "-t", "devices/dev1/commands/reboot", "-m", "now")...); err != nil {
		t.Fatalf("a command to dev1: %v\n%s", err, out)
	}
	dev1.waitText(t, "devices/dev1/commands/reboot now")
	if n := len(h.events("", "mqtt_acl_refused")); n < 2 {
		t.Fatalf("%d mqtt_acl_refused events, want the subscription and the command", n)
	}

	// A wrong password, another app's client identifier and a persistent session: refused.
	for what, args := range map[string][]string{
		"wrong password":       conn("app", "wrong-password", "mqttv311", "-t", "devices/dev1/x", "-m", "x"),
		"another identifier":   conn("app", "app-password-1", "mqttv311", "-i", "app:other", "-t", "devices/dev1/x", "-m", "x"),
		"a persistent session": conn("app", "app-password-1", "mqttv311", "-i", "app:app", "--disable-clean-session", "-t", "devices/dev1/x", "-m", "x"),
	} {
		if out, err := mosq(t, "mosquitto_pub", args...); err == nil || !strings.Contains(out, "not authorised") {
			t.Errorf("%s: %v\n%s", what, err, out)
		}
	}

	// A new password disconnects the app that logged in with the old one (a leaked
	// password is changed to cut its user off); the old one no longer logs in, the new one does.
	passwd := exec.Command(iotsafeBin, "account", "passwd", "app", "--password-stdin", "--data", h.data)
	passwd.Stdin = strings.NewReader("app-password-2\n")
	if out, err := passwd.CombinedOutput(); err != nil {
		t.Fatalf("account passwd: %v\n%s", err, out)
	}
	// cutOff: the app was disconnected for why, and password no longer logs in.
	cutOff := func(why, password string) {
		t.Helper()
		select {
		case <-appExited:
		case <-time.After(30 * time.Second):
			t.Fatalf("the app is still connected (want it cut off: %s):\n%s", why, app.text())
		}
		h.log.wait(t, "disconnecting a platform app's MQTT client", "account", "app", "why", why)
		if out, err := mosq(t, "mosquitto_pub", conn("app", password, "mqttv311", "-t", "devices/dev1/x", "-m", "x")...); err == nil || !strings.Contains(out, "not authorised") {
			t.Errorf("%s, and its password still logged in: %v\n%s", why, err, out)
		}
	}
	cutOff("password changed", "app-password-1")
	app, appExited = startSub(t, conn("app", "app-password-2", "mqttv5", "-i", "app:app", "-t", "devices/+/notifications/#", "-v", "-d")...)
	app.waitText(t, "received SUBACK")

	// Removing the account disconnects its app at once; its password no longer logs in.
	h.mustCLI("account", "remove", "app")
	cutOff("account removed", "app-password-2")
}

// A device logs in with a client certificate from 'iotsafe device cert' instead of a
// secret; revoking it, or enrolling its name again, refuses the certificate.
func TestMQTTClientCertificate(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	key := h.addDevice("dev1")
	h.mustCLI("device", "cert", "dev1", "--out", dir)
	if fi, err := os.Stat(filepath.Join(dir, "dev1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, fi)
	}
	certArgs := func(dir string) []string {
		return []string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-V", "mqttv311",
			"--cert", filepath.Join(dir, "dev1.crt"), "--key", filepath.Join(dir, "dev1.key")}
	}
	pubWith := func(dir, topic string) (string, error) {
		return mosq(t, "mosquitto_pub", append(certArgs(dir), "-t", topic, "-m", "x", "-q", "1")...)
	}
	pub := func(topic string) (string, error) { return pubWith(dir, topic) }
	if out, err := pub("devices/dev1/notifications/t"); err != nil {
		t.Fatalf("publish with the certificate: %v\n%s", err, out)
	}
	// Enrolled again under the same name: the old certificate is another device's.
	h.mustCLI("device", "remove", "dev1")
	os.Remove(key)
	os.Remove(key + ".pub")
	h.addDevice("dev1")
	if out, err := pub("devices/dev1/notifications/t"); err == nil || !strings.Contains(out, "not authorised") {
		t.Fatalf("the certificate of a removed device logged in: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(dir, "dev1.key"))
	h.mustCLI("device", "cert", "dev1", "--out", dir)
	if out, err := pub("devices/dev1/notifications/t"); err != nil {
		t.Fatalf("publish with the new certificate: %v\n%s", err, out)
	}
	// A newer certificate retires this one: its connected client goes at once, and it no
	// longer logs in; the new one does.
	sub, subExited := startSub(t, append(certArgs(dir), "-t", "devices/dev1/commands/#", "-d")...)
	sub.waitText(t, "received SUBACK")
	dir2 := t.TempDir()
	h.mustCLI("device", "cert", "dev1", "--out", dir2)
	select {
	case <-subExited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the client of the replaced certificate is still connected:\n%s", sub.text())
	}
	h.log.wait(t, "disconnecting a device's MQTT client", "device", "dev1", "why", "certificate replaced")
	if out, err := pub("devices/dev1/notifications/t"); err == nil || !strings.Contains(out, "not authorised") {
		t.Fatalf("a replaced certificate logged in: %v\n%s", err, out)
	}
	if out, err := pubWith(dir2, "devices/dev1/notifications/t"); err != nil {
		t.Fatalf("publish with the newest certificate: %v\n%s", err, out)
	}
	h.mustCLI("device", "revoke", "dev1")
	if out, err := pubWith(dir2, "devices/dev1/notifications/t"); err == nil || !strings.Contains(out, "not authorised") {
		t.Fatalf("a revoked device's certificate logged in: %v\n%s", err, out)
	}
	if out, err := h.cli("device", "cert", "dev1", "--out", t.TempDir()); err == nil || !strings.Contains(out, "revoked") {
		t.Fatalf("a certificate for a revoked device: %v\n%s", err, out)
	}
}

// 'iotsafe mqtt clients' on a hub without a broker says so (not that no hub runs).
func TestMQTTClientsWithoutBroker(t *testing.T) {
	h := startHub(t, "", "")
	if out, err := h.cli("mqtt", "clients"); err == nil || !strings.Contains(out, "broker is off") {
		t.Fatalf("mqtt clients without a broker: %v\n%s", err, out)
	}
}

// Only a device writes its own tree (issue 48, item 7): a platform app with +command
// publishes commands and nothing that would read as the device's telemetry, retained or
// not; and a device's retained messages go with its removal, so the device enrolled
// again under its name finds none.
func TestMQTTOnlyTheDeviceWritesItsTelemetry(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	conn := func(user, pw string, more ...string) []string {
		return append([]string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", user, "-P", pw, "-V", "mqttv5", "-q", "1"}, more...)
	}
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	h.addAccount("ctl", "ctl-password-1")
	h.mustCLI("grant", "--account", "ctl", "dev1", "+command")
	for _, topic := range []string{"devices/dev1/notifications/temp", "devices/dev1/status", "devices/dev1"} {
		if out, _ := mosq(t, "mosquitto_pub", conn("ctl", "ctl-password-1", "-r", "-t", topic, "-m", "forged")...); !strings.Contains(out, "Not authorized") {
			t.Errorf("an app with +command published on %s: %s", topic, out)
		}
	}
	if out, err := mosq(t, "mosquitto_pub", conn("ctl", "ctl-password-1", "-t", "devices/dev1/commands/open", "-m", "now")...); err != nil {
		t.Fatalf("a command: %v %s", err, out)
	}
	if out, err := mosq(t, "mosquitto_pub", conn("dev1", secret, "-r", "-t", "devices/dev1/status", "-m", "online")...); err != nil {
		t.Fatalf("dev1's retained status: %v %s", err, out)
	}
	// What a subscriber of dev1's tree is sent as retained: up to the first message that
	// is not (the probe published after its SUBACK ends the list).
	retained := func(secret string) string {
		sub, exited := startSub(t, conn("dev1", secret, "--retained-only", "-v", "-d", "-t", "devices/dev1/#")...)
		sub.waitText(t, "received SUBACK")
		if out, err := mosq(t, "mosquitto_pub", conn("dev1", secret, "-t", "devices/dev1/probe", "-m", "x")...); err != nil {
			t.Fatalf("probe: %v %s", err, out)
		}
		<-exited
		return sub.text()
	}
	if got := retained(secret); !strings.Contains(got, "devices/dev1/status online") {
		t.Fatalf("dev1's own retained status is not delivered:\n%s", got)
	}
	h.mustCLI("device", "remove", "dev1")
	os.Remove(filepath.Join(h.data, "keys", "dev1"))
	os.Remove(filepath.Join(h.data, "keys", "dev1.pub"))
	h.addDevice("dev1")
	secret = strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	if got := retained(secret); strings.Contains(got, "online") {
		t.Fatalf("the device enrolled again under the name got the old one's retained message:\n%s", got)
	}
}

// A device removed and enrolled again while the hub was down (offline commands) does not
// inherit the old enrolment's persistent MQTT session, whose messages were for it (issue
// 48, item 5): at start the broker drops what its session store kept of devices removed
// meanwhile.
func TestMQTTSessionOfADeviceRemovedWhileDown(t *testing.T) {
	port := freePort(t)
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '"+port+"'}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	args := func(secret string, more ...string) []string {
		return append([]string{"-h", "127.0.0.1", "-p", portOf(port), "--cafile", ca, "--insecure", "-u", "dev1", "-P", secret, "-V", "mqttv311"}, more...)
	}
	if out, err := mosq(t, "mosquitto_sub", args(secret, "-c", "-i", "dev1", "-q", "1", "-t", "devices/dev1/commands/#", "-E")...); err != nil {
		t.Fatalf("persistent subscription: %v\n%s", err, out)
	}
	if out, err := mosq(t, "mosquitto_pub", args(secret, "-i", "dev1/app", "-q", "1", "-t", "devices/dev1/commands/unlock", "-m", "4711")...); err != nil {
		t.Fatalf("publish while the subscriber is away: %v\n%s", err, out)
	}
	h.stop()
	h.mustCLI("device", "remove", "dev1")
	os.Remove(filepath.Join(h.data, "keys", "dev1"))
	os.Remove(filepath.Join(h.data, "keys", "dev1.pub"))
	h.addDevice("dev1")
	h.start()
	h.log.wait(t, "dropped the MQTT sessions and retained messages of devices removed while the hub was down", "devices", "1")
	// The new dev1 asks for its persistent session: a message waiting in the old one would
	// come at once, before the probe published after its SUBACK.
	secret = strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	sub, exited := startSub(t, args(secret, "-c", "-i", "dev1", "-q", "1", "-t", "devices/dev1/commands/#", "-C", "1", "-v", "-d")...)
	sub.waitText(t, "received SUBACK")
	if out, err := mosq(t, "mosquitto_pub", args(secret, "-i", "dev1/app", "-q", "1", "-t", "devices/dev1/commands/probe", "-m", "probe")...); err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	<-exited
	if got := sub.text(); strings.Contains(got, "4711") || !strings.Contains(got, "devices/dev1/commands/probe probe") {
		t.Fatalf("the new dev1 got the old one's session:\n%s", got)
	}
}
