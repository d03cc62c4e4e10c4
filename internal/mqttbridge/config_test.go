package mqttbridge

import (
	"strings"
	"testing"
)

func qos(n int) *int { return &n }

func validConfig() Config {
	c := Config{Address: "central.example:8883", CA: "/etc/ca.pem", Username: "site1", PasswordFile: "/etc/pw",
		Topics: []Rule{
			{Pattern: "devices/#", Remote: "site1/"},
			{Pattern: "commands/#", Direction: In, Local: "devices/", Remote: "site1/"},
		}}
	c.ApplyDefaults("host")
	return c
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	c := validConfig()
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.ClientID != "iotsafe-bridge-host" || c.ServerName != "central.example" || c.Protocol != "5" || *c.Topics[0].QoS != 1 || c.Topics[0].Direction != Out || c.Queue.Overflow != OverflowRefuse {
		t.Fatalf("defaults: %+v", c)
	}
	bad := map[string]func(*Config){
		"address":            func(c *Config) { c.Address = "central" },
		"ca":                 func(c *Config) { c.CA = "" },
		"protocol":           func(c *Config) { c.Protocol = "3" },
		"no rule":            func(c *Config) { c.Topics = nil },
		"direction":          func(c *Config) { c.Topics[0].Direction = "up" },
		"qos 2 is for":       func(c *Config) { c.Topics[0].QoS = qos(2) },
		"qos 3":              func(c *Config) { c.Topics[1].QoS = qos(3) },
		"no wildcards":       func(c *Config) { c.Topics[0].Remote = "site/+/" },
		"must be the last":   func(c *Config) { c.Topics[0].Pattern = "#/x" },
		"whole level":        func(c *Config) { c.Topics[0].Pattern = "devices/a#" },
		"$ topics":           func(c *Config) { c.Topics[0].Remote = "$SYS/" },
		"empty pattern":      func(c *Config) { c.Topics[0] = Rule{Direction: Out, QoS: qos(1), Local: "a/b"} },
		"overflow":           func(c *Config) { c.Queue.Overflow = "block" },
		"needs a username":   func(c *Config) { c.Username = "" },
		"cert and key":       func(c *Config) { c.Cert = "/etc/c.pem" },
		"keepalive":          func(c *Config) { c.Keepalive = 1 },
		"insecure_plain has": func(c *Config) { c.InsecurePlain = true },
		"would loop":         func(c *Config) { c.Protocol = "3.1.1"; c.Topics[1].Remote = ""; c.Topics[1].Pattern = "site1/#" },
		"would loop (both)":  func(c *Config) { c.Protocol = "3.1.1"; c.Topics[0].Direction = Both },
		"loop with a + level": func(c *Config) {
			c.Protocol = "3.1.1"
			c.Topics[1].Remote = ""
			c.Topics[1].Local = ""
			c.Topics[1].Pattern = "+/devices/#"
		},
	}
	for want, mod := range bad {
		c := validConfig()
		mod(&c)
		_, err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted %+v", want, c)
			continue
		}
		key, _, _ := strings.Cut(want, " (")
		if want == "loop with a + level" {
			key = "would loop"
		}
		if !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q does not say so", want, err)
		}
	}
	// MQTT 5 bridges a topic both ways (no-local keeps its own messages from coming back).
	c = validConfig()
	c.Topics[0].Direction = Both
	if _, err := c.Validate(); err != nil {
		t.Errorf("both with MQTT 5: %v", err)
	}
	// Plain only when asked, and then said.
	c = validConfig()
	c.CA, c.InsecurePlain = "", true
	weak, err := c.Validate()
	if err != nil || len(weak) != 1 || !strings.HasPrefix(weak[0], "mqtt.bridge.insecure_plain: ") {
		t.Errorf("insecure_plain: %v %v", weak, err)
	}
}

func TestRoute(t *testing.T) {
	rules := validConfig().Topics
	for _, c := range []struct {
		dir, topic, want string
		ok               bool
	}{
		{Out, "devices/dev1/notifications/t", "site1/devices/dev1/notifications/t", true},
		{Out, "devices", "site1/devices", true},
		{Out, "other/x", "", false},
		{In, "site1/commands/dev1/reboot", "devices/commands/dev1/reboot", true},
		{In, "site1/devices/dev1/x", "", false}, // an out topic does not come in
		{In, "site2/commands/x", "", false},
	} {
		got, q, ok := route(rules, c.dir, c.topic)
		if ok != c.ok || got != c.want || ok && q != 1 {
			t.Errorf("route(%s, %q) = %q, %d, %v; want %q, %v", c.dir, c.topic, got, q, ok, c.want, c.ok)
		}
	}
}
