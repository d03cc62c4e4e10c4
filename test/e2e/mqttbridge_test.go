package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/lab"
)

// mqttStatus runs `iotsafe mqtt status --json`.
func mqttStatus(t *testing.T, h *hubProc) (admin.MQTTInfo, error) {
	t.Helper()
	out, err := h.cli("mqtt", "status", "-o", "json")
	var st struct {
		MQTT admin.MQTTInfo `json:"mqtt"`
	}
	if jerr := json.Unmarshal([]byte(out[:strings.LastIndexByte(out, '}')+1]), &st); jerr != nil {
		t.Fatalf("iotsafe mqtt status --json: %v\n%s", jerr, out)
	}
	return st.MQTT, err
}

// poll checks cond until it holds: for states nothing announces (a bridge's connection).
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for delay := 5 * time.Millisecond; !cond(); delay = min(2*delay, 200*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(delay)
	}
}

// The hub's bridge to a real Mosquitto as the central broker: a device's reading goes
// out, a command from the centre comes in (and is not sent back out); while the centre
// is down, readings the hub acknowledged wait in the bridge's queue, across a restart of
// the hub, and arrive in order once the centre is back. `iotsafe mqtt status` shows it.
func TestMQTTBridge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cert, key, _, err := lab.WriteCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	needTool(t, "mosquitto")
	central, err := lab.StartMosquitto(ctx, filepath.Join(dir, "central"), lab.MosquittoOpts{CertFile: cert, KeyFile: key,
		Users: map[string]string{"site1": "site1-secret", "reader": "reader-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(central.Stop)
	pw := filepath.Join(dir, "bridge.pw")
	os.WriteFile(pw, []byte("site1-secret\n"), 0o600)
	h := startHub(t, "", fmt.Sprintf(`frontdoor: {listen: '127.0.0.1:0', domain: %s}
rest: {listen: '127.0.0.1:0'}
mqtt:
  tls_listen: '127.0.0.1:0'
  bridge:
    address: %q
    ca: %q
    server_name: lab
    username: site1
    password_file: %q
    client_id: site1
    keepalive: 5s
    topics:
      - {pattern: "+/notifications/#", local: "devices/", remote: "site1/devices/"}
      - {pattern: "+/commands/#", direction: in, local: "devices/", remote: "site1/devices/"}
`, fdDomain, central.Addr, cert, pw))
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	ca := filepath.Join(dir, "hub-ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	dev := func(more ...string) []string {
		return append([]string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", "dev1", "-P", secret, "-V", "mqttv5"}, more...)
	}
	centreHost, centrePort, _ := strings.Cut(central.Addr, ":")
	centre := func(more ...string) []string {
		return append([]string{"-h", centreHost, "-p", centrePort, "--cafile", cert, "--insecure", "-u", "reader", "-P", "reader-secret"}, more...)
	}
	reader, _ := startSub(t, centre("-i", "reader", "-c", "-q", "1", "-t", "site1/#", "-v", "-d")...)
	reader.waitText(t, "received SUBACK")
	commands, _ := startSub(t, dev("-t", "devices/dev1/commands/#", "-v", "-d")...)
	commands.waitText(t, "received SUBACK")
	h.log.wait(t, "the central broker acknowledged the bridge's subscriptions")
	if st, err := mqttStatus(t, h); err != nil || st.Bridge == nil || !st.Bridge.Subscribed || st.Bridge.State != "connected" {
		t.Fatalf("iotsafe mqtt status with the bridge up: %v %+v", err, st.Bridge)
	}

	// Out: a reading, acknowledged by the hub, arrives at the centre under the site's prefix.
	if out, err := mosq(t, "mosquitto_pub", dev("-q", "1", "-t", "devices/dev1/notifications/temperature", "-m", `{"c":21.5}`)...); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	reader.waitText(t, `site1/devices/dev1/notifications/temperature {"c":21.5}`)
	// So does a notification the device sends over the REST API.
	postNotification(t, h, "dev1", secret, "humidity")
	reader.waitText(t, "site1/devices/dev1/notifications/humidity")
	// In: the centre's command reaches the device, once.
	if out, err := mosq(t, "mosquitto_pub", centre("-q", "1", "-t", "site1/devices/dev1/commands/reboot", "-m", "now")...); err != nil {
		t.Fatalf("publish at the centre: %v\n%s", err, out)
	}
	commands.waitText(t, "devices/dev1/commands/reboot now")
	// A reading sent after the command arrived comes after any echo of it would have.
	mosq(t, "mosquitto_pub", dev("-q", "1", "-t", "devices/dev1/notifications/after", "-m", "1")...)
	reader.waitText(t, "site1/devices/dev1/notifications/after 1")
	if n := strings.Count(reader.text(), "site1/devices/dev1/commands/reboot now"); n != 1 {
		t.Fatalf("the command came back to the centre: seen %d times\n%s", n, reader.text())
	}

	// The centre goes away: readings are acknowledged all the same and wait on disk.
	central.Stop()
	const n = 20
	for i := range n {
		if out, err := mosq(t, "mosquitto_pub", dev("-q", "1", "-t", fmt.Sprintf("devices/dev1/notifications/q%02d", i), "-m", fmt.Sprint(i))...); err != nil {
			t.Fatalf("publish %d while the centre is down: %v\n%s", i, err, out)
		}
	}
	// A REST notification answered while the centre is down waits with them.
	postNotification(t, h, "dev1", secret, "rest-while-down")
	st, err := mqttStatus(t, h)
	if err == nil || st.Bridge == nil || st.Bridge.Queued != n+1 || st.Bridge.State == "connected" {
		t.Fatalf("while the centre is down: exit %v, %+v", err, st.Bridge)
	}
	text, _ := h.cli("mqtt", "status")
	if !strings.Contains(text, fmt.Sprintf("%d messages", n+1)) || !strings.Contains(text, "waiting for the central broker") {
		t.Fatalf("iotsafe mqtt status:\n%s", text)
	}
	if fi, err := os.Stat(filepath.Join(h.data, "mqtt-bridge.db")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bridge queue file: %v %v", err, fi)
	}
	// The hub restarts with them queued, then the centre comes back: all arrive, in order.
	h.stop()
	h.start()
	if err := central.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reader.waitText(t, "site1/devices/dev1/notifications/rest-while-down")
	reader.waitText(t, fmt.Sprintf("site1/devices/dev1/notifications/q%02d %d", n-1, n-1))
	last := -1
	for _, l := range strings.Split(reader.text(), "\n") {
		var i int
		if _, err := fmt.Sscanf(l, "site1/devices/dev1/notifications/q%02d %d", &i, &i); err == nil {
			if i < last {
				t.Fatalf("q%02d arrived after q%02d", i, last)
			}
			last = i
		}
	}
	poll(t, "the queue to empty", func() bool {
		st, err := mqttStatus(t, h)
		return err == nil && st.Bridge != nil && st.Bridge.Queued == 0
	})
}

// A REST notification the bridge's full queue refuses (overflow: refuse) is not
// acknowledged: the device gets 503 and sends it again; what the queue took is answered.
// The centre is unreachable (nothing listens on its port), so the queue only fills.
func TestRESTNotificationRefusedByAFullBridgeQueue(t *testing.T) {
	dir := t.TempDir()
	cert, _, _, err := lab.WriteCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	port, err := lab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(dir, "bridge.pw")
	os.WriteFile(pw, []byte("site1-secret\n"), 0o600)
	h := startHub(t, "", fmt.Sprintf(`rest: {listen: '127.0.0.1:0'}
mqtt:
  listen: '127.0.0.1:0'
  bridge:
    address: 127.0.0.1:%d
    ca: %q
    username: site1
    password_file: %q
    topics:
      - {pattern: "+/notifications/#", local: "devices/", remote: "site1/devices/"}
    queue: {max_messages: 1, overflow: refuse}
`, port, cert, pw))
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	postNotification(t, h, "dev1", secret, "first") // queued
	url := "http://" + h.rest + "/api/rest/device/dev1/notification"
	code, got, _ := restCall(t, plainClient, "POST", url, deviceBearer(t, h, "dev1", secret), map[string]any{"notification": "second"})
	if code != 503 || got["error"] != float64(503) {
		t.Fatalf("a notification the full queue refused: %d %v; want 503, to be sent again", code, got)
	}
	h.log.wait(t, "the bridge's queue did not take a notification; its device is told to send it again")
	if st, _ := mqttStatus(t, h); st.Bridge == nil || st.Bridge.Queued != 1 {
		t.Fatalf("bridge %+v: want the first notification queued", st.Bridge)
	}
}

// Mosquitto as a site broker bridging into the hub, as one device: what a sensor
// publishes at the site arrives at the hub under the device's topics and is stored.
func TestMosquittoSiteBridgesIntoHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	needTool(t, "mosquitto")
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	h.addDevice("site2")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "site2"))
	dir := t.TempDir()
	ca := filepath.Join(dir, "hub-ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	// The hub's certificate names the front door's domain, not 127.0.0.1: the bridge
	// checks the chain against the hub's CA but not the name (bridge_insecure).
	// try_private and notifications off: the hub speaks plain MQTT and a device may not
	// publish Mosquitto's $SYS status topics.
	site, err := lab.StartMosquitto(ctx, filepath.Join(dir, "site"), lab.MosquittoOpts{Extra: fmt.Sprintf(`
connection hub
address %s
bridge_cafile %s
bridge_insecure true
remote_username site2
remote_password %s
remote_clientid site2/bridge
try_private false
notifications false
bridge_protocol_version mqttv311
topic # out 1 sensors/ devices/site2/notifications/
`, h.mqttTLS, ca, secret)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(site.Stop)
	hubSub, _ := startSub(t, "-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", "site2", "-P", secret, "-i", "site2/sub",
		"-t", "devices/site2/#", "-v", "-d")
	hubSub.waitText(t, "received SUBACK")
	h.log.wait(t, "mqtt client connected", "client", "site2/bridge")
	siteHost, sitePort, _ := strings.Cut(site.Addr, ":")
	if out, err := mosq(t, "mosquitto_pub", "-h", siteHost, "-p", sitePort, "-q", "1", "-t", "sensors/temperature", "-m", `{"c":19}`); err != nil {
		t.Fatalf("publish at the site: %v\n%s", err, out)
	}
	hubSub.waitText(t, `devices/site2/notifications/temperature {"c":19}`)
	poll(t, "the reading to be stored", func() bool {
		st, err := mqttStatus(t, h)
		return err == nil && st.Stored >= 1
	})
	if n := len(h.events("site2", "violation")); n != 0 {
		t.Fatalf("the site's bridge broke site2's rules %d times: %v", n, h.events("site2", "violation"))
	}
}
