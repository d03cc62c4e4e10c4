package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MQTT 5 acknowledgements carry valid reason codes and none of the properties of the
// packet they answer (issue 54.1): a QoS 1 or 2 PUBLISH with a user property, content
// type, response topic and correlation data is answered PUBACK / PUBREC / PUBCOMP with
// code 0 (mosquitto_pub's debug lines), and paho-mqtt, whose network thread dies on the
// old PUBACK 0x01, completes both publishes.
func TestMQTT5AcksAreValid(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {listen: '127.0.0.1:0', tls_listen: '127.0.0.1:0'}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	base := []string{"-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", "dev1", "-P", secret, "-V", "mqttv5", "-d",
		"-t", "devices/dev1/notifications/t", "-m", `{"c":1}`,
		"-D", "publish", "user-property", "a", "2", "-D", "publish", "content-type", "application/json",
		"-D", "publish", "response-topic", "devices/dev1/notifications/answer", "-D", "publish", "correlation-data", "corr-1"}
	for qos, want := range map[string][]string{"1": {"received PUBACK (Mid: 1, RC:0)"}, "2": {"received PUBREC (Mid: 1)", "received PUBCOMP (Mid: 1, RC:0)"}} {
		out, err := mosq(t, "mosquitto_pub", append(base, "-q", qos)...)
		for _, w := range want {
			if err != nil || !strings.Contains(out, w) {
				t.Fatalf("QoS %s publish: want %q: %v\n%s", qos, w, err, out)
			}
		}
	}
	py := venvTool(t, "python")
	out, err := exec.Command(py, "testdata/paho_mqtt5_publish.py", "127.0.0.1", portOf(h.mqttTLS), ca, "dev1", secret).CombinedOutput()
	if err != nil || strings.Count(string(out), "acked mid=") != 2 || !strings.Contains(string(out), "rc=Success") {
		t.Fatalf("paho-mqtt: %v\n%s", err, out)
	}
}
