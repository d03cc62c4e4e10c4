package mqttbroker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/mqttbridge"
	"github.com/iotsafe/iotsafe/internal/mqtttopic"
	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

func TestTopicRules(t *testing.T) {
	for _, c := range []struct {
		filter, topic string
		want          bool
	}{
		{"devices/+/notifications/#", "devices/dev1/notifications/temp", true},
		{"devices/+/notifications/#", "devices/dev1/notifications", true},
		{"devices/+/notifications/#", "devices/dev1/other/temp", false},
		{"devices/+/x", "devices/dev1/x/y", false},
		{"devices/dev1/x", "devices/dev1/x", true},
	} {
		if got := mqtttopic.Match(c.filter, c.topic); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.filter, c.topic, got)
		}
	}
	for _, bad := range []string{"other/+", "devices/#/x", "devices/a+b", "devices"} {
		if validFilter(bad) == nil {
			t.Errorf("filter %q accepted", bad)
		}
	}
	// A device's own subtree only: no wildcard above its name, no neighbour with a
	// longer name, no $SYS.
	for topic, want := range map[string]bool{
		"devices/dev1": true, "devices/dev1/notifications/t": true, "devices/dev1/#": true,
		"devices/+/notifications/t": false, "devices/#": false, "devices/dev10/x": false, "$SYS/broker/uptime": false, "devices/dev2/x": false,
	} {
		if got := allowed("dev1", topic); got != want {
			t.Errorf("allowed(dev1, %q) = %v", topic, got)
		}
	}
}

// A payload becomes the notification's parameters: JSON as is, text as
// {"payload": ...}, anything else base64; the name is what follows notifications/.
func TestNotificationFromMessage(t *testing.T) {
	n := notification("dev1", "devices/dev1/notifications/temperature", []byte(`{"c":21.5}`))
	if n.Name != "temperature" || string(n.Parameters) != `{"c":21.5}` || n.Device != "dev1" {
		t.Fatalf("%+v", n)
	}
	n = notification("dev1", "devices/dev1/notifications/door/front", []byte("open"))
	if n.Name != "door/front" || string(n.Parameters) != `{"payload":"open"}` {
		t.Fatalf("%+v %s", n, n.Parameters)
	}
	n = notification("dev1", "devices/dev1/raw", []byte{0xff, 0x00})
	var p map[string][]byte
	if n.Name != "raw" || json.Unmarshal(n.Parameters, &p) != nil || string(p["payload_base64"]) != "\xff\x00" {
		t.Fatalf("%+v %s", n, n.Parameters)
	}
	if n := notification("dev1", "devices/dev1/notifications/ping", nil); n.Parameters != nil {
		t.Fatalf("an empty payload has parameters %s", n.Parameters)
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		front bool
		want  string
	}{
		{Config{Listen: "0.0.0.0:1883"}, false, "must be a loopback address"},
		{Config{Listen: "localhost:1883"}, false, "must be a loopback address"},
		{Config{TLSListen: "127.0.0.1:8883"}, false, "needs mqtt.cert and mqtt.key, or the front door"},
		{Config{TLSListen: "127.0.0.1:8883", Cert: "c.pem"}, false, "both cert and key"},
		{Config{TLSListen: "127.0.0.1:8883", TLS: tlsPolicyWithSuite("DHE-RSA-AES128-GCM-SHA256")}, true, "mqtt.tls.suites"},
		{Config{Listen: "127.0.0.1:1883", Store: []string{"sensors/#"}}, false, "mqtt.store[0]"},
		{Config{Listen: "127.0.0.1:1883", MaxPending: -1}, false, "max_pending"},
		{Config{Bridge: &mqttbridge.Config{Address: "c:8883", CA: "ca.pem", Topics: []mqttbridge.Rule{{Pattern: "devices/#"}}}}, false, "mqtt.bridge needs the broker"},
		{Config{Listen: "127.0.0.1:1883", Bridge: &mqttbridge.Config{Address: "c:8883", Topics: []mqttbridge.Rule{{Pattern: "devices/#"}}}}, false, "mqtt.bridge.ca"},
	} {
		c.cfg.ApplyDefaults()
		if _, err := c.cfg.Validate(c.front); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	ok := Config{Listen: "127.0.0.1:0", TLSListen: "0.0.0.0:8883"}
	ok.ApplyDefaults()
	if _, err := ok.Validate(true); err != nil {
		t.Fatal(err)
	}
}

// Any filter the config accepts matches the topics it names: its wildcards filled in.
func FuzzTopicFilter(f *testing.F) {
	for _, s := range []string{"devices/+/notifications/#", "devices/dev1/x", "devices/#", "devices/+/+/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		if validFilter(filter) != nil {
			return
		}
		topic := strings.ReplaceAll(strings.ReplaceAll(filter, "+", "x"), "#", "a/b")
		if !mqtttopic.Match(filter, topic) {
			t.Fatalf("filter %q does not match %q", filter, topic)
		}
		if strings.Contains(filter, "+") && mqtttopic.Match(filter, topic+"/extra") && !strings.HasSuffix(filter, "#") {
			t.Fatalf("filter %q matches a topic one level longer", filter)
		}
	})
}

func tlsPolicyWithSuite(s string) (p tlspolicy.Policy) { p.Suites = []string{s}; return p }
