package profile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestParseAppliesDefaults(t *testing.T) {
	p, err := Parse([]byte("name: cam\nreverse: {http: 80, rtsp: 554}\ndirect: {broker: '127.0.0.1:1883'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxSessions != 1 || p.MaxForwards != 2 || p.MaxChannels != 64 || p.OnViolation.Action != ActionLog || p.OnViolation.After != 5 {
		t.Fatalf("defaults not applied: %+v", p)
	}
	if got := p.ReverseAliases(); len(got) != 2 || got[0] != "http" || got[1] != "rtsp" {
		t.Fatalf("aliases %v", got)
	}
	again, err := Parse(p.Marshal())
	if err != nil || again.Direct["broker"] != "127.0.0.1:1883" {
		t.Fatalf("round trip: %+v %v", again, err)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ in, field string }{
		{"name: Bad Name\n", "name"},
		{"name: p\nreverse: {http: 70000}\n", "reverse.http"},
		{"name: p\ndirect: {db: 'localhost'}\n", "direct.db"},
		{"name: p\ndirect: {db: ':5432'}\n", "direct.db"},
		{"name: p\nmax_channels: -4\n", "max_channels"},
		{"name: p\non_violation: {action: nuke}\n", "on_violation.action"},
		{"name: p\nunknown_field: 1\n", "unknown_field"},
		{"name: [1, 2]\n", "name"},
		{"name: gw\ngateway: {max_devices: -1}\n", "gateway.max_devices"},
		{"name: gw\ngateway: {device_profile: Cams}\n", "gateway.device_profile"},
		{"name: gw\ngateway: {device_profile: gw}\n", "gateway.device_profile"},
		{"name: gw\ngateway: {devices: ['site[']}\n", "gateway.devices"},
		{"name: gw\ngateway: {max_device: 3}\n", "max_device"},
	} {
		_, err := Parse([]byte(tc.in))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: want ErrInvalid naming %q, got %v", tc.in, tc.field, err)
		}
	}
}

// A gateway's profile bounds the devices it may announce; unset fields get defaults.
func TestGatewayPolicy(t *testing.T) {
	p, err := Parse([]byte("name: site-gw\ngateway: {devices: ['site1-*', sensor]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := p.Gateway
	if g == nil || g.MaxDevices != DefaultGatewayDevices || g.DeviceProfile != DefaultName {
		t.Fatalf("defaults not applied: %+v", g)
	}
	for name, want := range map[string]bool{"site1-cam": true, "sensor": true, "site2-cam": false, "sensor2": false} {
		if g.Allows(name) != want {
			t.Errorf("Allows(%q) = %v", name, !want)
		}
	}
	if again, err := Parse(p.Marshal()); err != nil || again.Gateway == nil || len(again.Gateway.Devices) != 2 {
		t.Fatalf("round trip: %+v %v", again, err)
	}
	if plain, _ := Parse([]byte("name: cam\n")); plain.Gateway != nil {
		t.Fatal("a profile without gateway: became a gateway")
	}
}

func TestDefaultProfile(t *testing.T) {
	p := Default()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(p.Reverse) != 1 || len(p.Direct) != 0 {
		t.Fatalf("default profile must allow only 'http': %+v", p)
	}
}

func TestCryptoPolicy(t *testing.T) {
	var c CryptoPolicy
	c.ApplyDefaults()
	if bad, err := c.Validate(); err != nil || len(bad) != 0 {
		t.Fatalf("defaults: %v %v", bad, err)
	}
	c.Ciphers = []string{"aes128-cbc"}
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "allow_insecure") {
		t.Fatalf("insecure cipher accepted silently: %v", err)
	}
	c.AllowInsecure = true
	if bad, err := c.Validate(); err != nil || len(bad) != 1 {
		t.Fatalf("allow_insecure: %v %v", bad, err)
	}
	c.Ciphers = []string{"rot13"}
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ssh.ciphers") {
		t.Fatalf("unknown cipher: %v", err)
	}
	// hmac-sha1 is a SHA-1 MAC: the library supports it, the hub treats it as insecure.
	var m CryptoPolicy
	m.MACs = []string{"hmac-sha2-256-etm@openssh.com", "hmac-sha1"}
	m.ApplyDefaults()
	if _, err := m.Validate(); err == nil || !strings.Contains(err.Error(), "hmac-sha1") {
		t.Fatalf("hmac-sha1 accepted without allow_insecure: %v", err)
	}
	m.AllowInsecure = true
	if bad, err := m.Validate(); err != nil || len(bad) != 1 || bad[0] != "hmac-sha1" {
		t.Fatalf("hmac-sha1 with allow_insecure: %v %v", bad, err)
	}
	// allow_insecure alone adds nothing to the defaults.
	var only CryptoPolicy
	only.AllowInsecure = true
	only.ApplyDefaults()
	if bad, err := only.Validate(); err != nil || len(bad) != 0 {
		t.Fatalf("allow_insecure alone: %v %v", bad, err)
	}
}

// FuzzParseProfile: any input either fails with ErrInvalid or yields a valid profile
// that survives a round trip.
func FuzzParseProfile(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse returned an invalid profile: %v", err)
		}
		if _, err := Parse(p.Marshal()); err != nil {
			t.Fatalf("round trip of %+v: %v", p, err)
		}
	})
}

func TestExampleProfileParses(t *testing.T) {
	b, err := os.ReadFile("../../docs/examples/camera-profile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b)
	if err != nil || p.Name != "camera" || p.Direct["broker"] == "" {
		t.Fatalf("%+v %v", p, err)
	}
	// The README's quick start: 'ssh -R http:80:... -L 1883:broker:1883' with this profile.
	b, err = os.ReadFile("../../docs/examples/sensor-profile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err = Parse(b)
	if err != nil || p.Name != "sensor" || p.Direct["broker"] != "127.0.0.1:1883" || p.Reverse["http"] != 80 || p.MaxForwards < 2 {
		t.Fatalf("sensor profile: %+v %v", p, err)
	}
}

func TestProfileSizeBounded(t *testing.T) {
	p := Profile{Name: "big", Reverse: map[string]int{}}
	for i := 0; i <= MaxAliases; i++ {
		p.Reverse[fmt.Sprintf("a%d", i)] = 0
	}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("%d aliases: %v", MaxAliases+1, err)
	}
	if _, err := Parse(make([]byte, MaxSize+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("oversized profile: %v", err)
	}
}
