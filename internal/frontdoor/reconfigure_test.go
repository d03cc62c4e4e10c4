package frontdoor

import (
	"slices"
	"testing"
	"time"
)

// Reconfigure applies the request limits and names every other changed setting; an
// invalid configuration changes nothing.
func TestReconfigure(t *testing.T) {
	cfg := Config{Listen: "127.0.0.1:8443", Domain: "devices.example.com", Routes: []Route{{Alias: "cam", MaxBody: 1 << 10}}}
	cfg.ApplyDefaults()
	s := &Server{cfg: cfg}
	s.limits.Store(&cfg)

	next := cfg
	next.Routes = []Route{{Alias: "cam", MaxBody: 4 << 10, ResponseTimeout: time.Minute}}
	next.MaxBody = 2 << 20
	next.Domain = "devices.example.org"
	next.SessionTTL = time.Hour
	restart, err := s.Reconfigure(next)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(restart, []string{"domain", "session_ttl"}) {
		t.Fatalf("settings that need a restart: %v", restart)
	}
	if body, timeout := s.limits.Load().limits("cam"); body != 4<<10 || timeout != time.Minute {
		t.Fatalf("cam limits %d, %v after reload", body, timeout)
	}
	if body, _ := s.limits.Load().limits("http"); body != 2<<20 {
		t.Fatalf("default body limit %d after reload", body)
	}
	if s.cfg.Domain != "devices.example.com" {
		t.Fatalf("the running domain changed to %s", s.cfg.Domain)
	}

	bad := next
	bad.Domain = ""
	if _, err := s.Reconfigure(bad); err == nil {
		t.Fatal("a configuration without a domain was accepted")
	}
	if body, _ := s.limits.Load().limits("cam"); body != 4<<10 {
		t.Fatalf("a refused reload changed the limits: %d", body)
	}
}
