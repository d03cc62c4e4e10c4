package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestEmptyConfigIsSafeDefaults(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.SSH.Listen != "127.0.0.1:2222" {
		t.Fatalf("default listen %q is not loopback", c.SSH.Listen)
	}
	if c.Metrics.Listen != "" {
		t.Fatal("metrics must be opt-in")
	}
	if c.SSH.Crypto.AllowInsecure || len(c.SSH.Crypto.HostKeyAlgorithms) != 1 || c.SSH.Crypto.HostKeyAlgorithms[0] != ssh.KeyAlgoED25519 {
		t.Fatalf("crypto defaults: %+v", c.SSH.Crypto)
	}
	if c.SSH.MaxRejectedChannels == 0 || c.SSH.MaxHandshakes == 0 || c.SSH.KeepaliveTimeout == 0 {
		t.Fatalf("a limit has no default: %+v", c.SSH)
	}
}

func TestConfigFields(t *testing.T) {
	c, err := ParseConfig([]byte("ssh:\n  listen: 0.0.0.0:22\n  keepalive_interval: 5s\npool: {cidr: 127.80.0.0/16, port_base: 20000}\nlog: {level: debug, format: json}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.SSH.KeepaliveInterval != 5*time.Second || c.SSH.KeepaliveTimeout != 15*time.Second || c.Pool.PortBase != 20000 {
		t.Fatalf("%+v", c)
	}
	for _, tc := range []struct{ in, want string }{
		{"ssh: {listen: nowhere}\n", "ssh.listen"},
		{"ssh:\n  max_handshakes: -1\n", "ssh.max_handshakes"},
		{"ssh:\n  keepalive_interval: 5\n", "keepalive_interval"},
		{"pool: {port_base: 80}\n", "pool.port_base"},
		{"metrics: {listen: x, extra: 1}\n", "extra"},
		{"telemetry: {commit_interval: -1ms}\n", "telemetry.commit_interval"},
		{"telemetry: {commit_interval: 2s}\n", "telemetry.commit_interval"},
	} {
		_, err := ParseConfig([]byte(tc.in))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want ErrConfig naming %q, got %v", tc.in, tc.want, err)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadConfig("", dir); err != nil {
		t.Fatalf("missing default config must mean defaults: %v", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "nope.yaml"), dir); err == nil {
		t.Fatal("a missing explicit --config must be an error")
	}
	os.WriteFile(filepath.Join(dir, ConfigName), []byte("ssh: {listen: '127.0.0.1:2300'}\n"), 0o600)
	c, err := LoadConfig("", dir)
	if err != nil || c.SSH.Listen != "127.0.0.1:2300" {
		t.Fatalf("%+v %v", c.SSH.Listen, err)
	}
}

// FuzzParseConfig: any input is either a clear ErrConfig or a valid config.
func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error not wrapping ErrConfig: %v", err)
			}
			return
		}
		if _, err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig returned an invalid config: %v", err)
		}
	})
}

// The documented example must stay valid.
func TestExampleConfigParses(t *testing.T) {
	b, err := os.ReadFile("../../docs/examples/hub.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	var d Config
	d.ApplyDefaults()
	if c.SSH.Listen != d.SSH.Listen || c.SSH.KeepaliveTimeout != d.SSH.KeepaliveTimeout || c.SSH.MaxRejectedChannels != d.SSH.MaxRejectedChannels {
		t.Fatalf("the example claims to show the defaults but differs: %+v", c.SSH)
	}
}

// An empty or comment-only file says so instead of nothing.
func TestLoadConfigSaysWhereItCameFrom(t *testing.T) {
	dir := t.TempDir()
	c, err := LoadConfig("", dir)
	if err != nil || !strings.Contains(c.Source, "does not exist") {
		t.Fatalf("no file: %q %v", c.Source, err)
	}
	p := filepath.Join(dir, "hub.yaml")
	os.WriteFile(p, []byte("# nothing here yet\n\n"), 0o600)
	if c, err = LoadConfig(p, dir); err != nil || !strings.Contains(c.Source, "using defaults") {
		t.Fatalf("comment-only file: %q %v", c.Source, err)
	}
	os.WriteFile(p, []byte("log: {level: debug}\n"), 0o600)
	if c, err = LoadConfig(p, dir); err != nil || c.Source != p {
		t.Fatalf("a real file: %q %v", c.Source, err)
	}
}

// The config type marshals to YAML the hub reads back to the same configuration: the
// lab writes its hubs' hub.yaml this way rather than formatting YAML by hand.
func TestConfigMarshalRoundTrip(t *testing.T) {
	for _, src := range []string{
		"",
		"ssh: {listen: '127.0.0.1:0', max_handshakes: 4096, forward_memory_mib: 1048576}\npool: {cidr: 127.80.0.0/16, shared_listeners: true}\naccess: {kernel: off, userspace: on}\nfrontdoor: {listen: '127.0.0.1:0', domain: lab.test, max_conns: 100}\nrest: {listen: '127.0.0.1:0'}\nmqtt: {listen: '127.0.0.1:0'}\nmetrics: {listen: '127.0.0.1:0'}\nlog: {level: error}\n",
	} {
		want, err := ParseConfig([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		out, err := MarshalConfig(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseConfig(out)
		if err != nil {
			t.Fatalf("reading back:\n%s\n%v", out, err)
		}
		// Settings compare by what they write: nil and empty lists are the same setting.
		again, err := MarshalConfig(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(out) {
			t.Fatalf("round trip of %q differs:\n%s\nread back as\n%s", src, out, again)
		}
		if got.SSH.Listen != want.SSH.Listen || got.Frontdoor.MaxConns != want.Frontdoor.MaxConns || got.Pool != want.Pool || got.Access != want.Access {
			t.Fatalf("round trip of %q: got %+v", src, got)
		}
	}
}

// A config file with the registry's password that other users can read is refused with
// what to do (issue 48, item 11); at 0600, or without a password, it loads.
func TestConfigWithAPasswordMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hub.yaml")
	for _, dsn := range []string{"postgres://iotsafe:s3cret@db.example/iotsafe", "postgres://iotsafe@db.example/iotsafe?password=s3cret"} {
		os.WriteFile(p, []byte("registry: {dsn: '"+dsn+"'}\n"), 0o644)
		os.Chmod(p, 0o644)
		_, err := LoadConfig(p, dir)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s readable by others: %v", dsn, err)
		}
		os.Chmod(p, 0o600)
		if _, err := LoadConfig(p, dir); err != nil {
			t.Fatalf("%s at 0600: %v", dsn, err)
		}
	}
	os.WriteFile(p, []byte("registry: {dsn: 'postgres://iotsafe@db.example/iotsafe?passfile=/etc/iotsafe/pgpass'}\n"), 0o644)
	os.Chmod(p, 0o644)
	if _, err := LoadConfig(p, dir); err != nil {
		t.Fatalf("a passfile DSN in a readable file: %v", err)
	}
}
