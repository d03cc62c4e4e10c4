package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iotsafe/iotsafe/internal/childproc"
)

// Shared subscriptions ($share/GROUP/FILTER) are allowed where FILTER is (issue 54.2): a
// device inside its own tree, a platform app's workers over the devices they hold
// +telemetry on, each message going to one worker of the group and each delivery
// checked as any other; a device's shared subscription to another device's topics is
// refused and is a violation, as the plain one is.
func TestMQTTSharedSubscriptions(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	conn := func(user, pw string, more ...string) []string {
		return append([]string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", user, "-P", pw, "-V", "mqttv5"}, more...)
	}
	secrets := map[string]string{}
	for _, dev := range []string{"dev1", "dev3"} {
		h.addDevice(dev)
		secrets[dev] = strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", dev))
	}
	// A device's shared subscription inside its own tree.
	own, _ := startSub(t, conn("dev1", secrets["dev1"], "-i", "dev1/own", "-t", "$share/g/devices/dev1/notifications/#", "-v", "-d")...)
	own.waitText(t, "Subscribed (mid: 1): ") // -d's line with the granted QoS, or the refusal
	if !strings.Contains(own.text(), "Subscribed (mid: 1): 0") {
		t.Fatalf("dev1's shared subscription to its own tree was refused:\n%s", own.text())
	}
	// ... and one outside it: refused, a violation.
	if out, _ := mosq(t, "mosquitto_sub", conn("dev1", secrets["dev1"], "-t", "$share/g/devices/dev3/#", "-C", "1")...); !strings.Contains(out, "All subscription requests were denied") {
		t.Fatalf("dev1's shared subscription to dev3's tree:\n%s", out)
	}
	if d := h.device("dev1"); d.Violations != 1 {
		t.Fatalf("dev1 has %d violations, want 1 (the shared subscription to dev3)", d.Violations)
	}
	// A platform app's two workers share one subscription over every device.
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry") // dev1 only
	group := conn("app", "app-password-1", "-t", "$share/workers/devices/+/notifications/#", "-v", "-d")
	workers := startSubsSharingOutput(t, append([]string{"-i", "app:app/w1"}, group...), append([]string{"-i", "app:app/w2"}, group...))
	workers.waitUntil(t, "both workers subscribed", func() bool { return strings.Count(workers.raw.String(), "received SUBACK") == 2 })
	if out, err := mosq(t, "mosquitto_pub", conn("dev3", secrets["dev3"], "-q", "1", "-t", "devices/dev3/notifications/t", "-m", "not-for-app")...); err != nil {
		t.Fatalf("dev3 publish: %v\n%s", err, out)
	}
	for _, m := range []string{"m1", "m2", "m3", "m4"} {
		if out, err := mosq(t, "mosquitto_pub", conn("dev1", secrets["dev1"], "-q", "1", "-t", "devices/dev1/notifications/t", "-m", m)...); err != nil {
			t.Fatalf("dev1 publish: %v\n%s", err, out)
		}
	}
	// Both workers' output in one watch: each message, wherever it went, shows once.
	received := func() int { return strings.Count(workers.raw.String(), "devices/dev1/notifications/t m") }
	workers.waitUntil(t, "the workers reading dev1's 4 messages", func() bool { return received() >= 4 })
	if out := workers.text(); strings.Count(out, "devices/dev1/notifications/t m") != 4 {
		t.Fatalf("the group did not receive dev1's 4 messages once each:\n%s", out)
	}
	own.waitText(t, "devices/dev1/notifications/t m4") // the device's own group, too
	if out := workers.text(); strings.Contains(out, "not-for-app") {
		t.Fatalf("a worker read dev3, which the app holds no grant on:\n%s", out)
	}
	// dev3's message was filtered from the group, not counted as the app's refusal.
	for _, e := range h.events("", "mqtt_acl_refused") {
		if strings.Contains(e.Detail, "account app") {
			t.Fatalf("a filtered delivery was audited as the app's refusal: %+v", e)
		}
	}
}

// startSubsSharingOutput runs one mosquitto_sub per argument list, all writing into one
// watched output (line-buffered: whole lines), so that a test waits on what the group
// received, whichever member received it.
func startSubsSharingOutput(t *testing.T, argLists ...[]string) *logWatch {
	t.Helper()
	pr, pw := io.Pipe()
	w := newLogWatch(pr)
	var running sync.WaitGroup
	for _, args := range argLists {
		cmd := exec.Command(needTool(t, "stdbuf"), append([]string{"-oL", needTool(t, "mosquitto_sub")}, args...)...)
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := childproc.Start(cmd); err != nil {
			t.Fatal(err)
		}
		running.Add(1)
		go func() { cmd.Wait(); running.Done() }()
		t.Cleanup(func() { cmd.Process.Kill() })
	}
	go func() { running.Wait(); pw.Close() }()
	return w
}
