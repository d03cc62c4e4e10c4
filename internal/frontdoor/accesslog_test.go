package frontdoor

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// access_log chooses which requests leave a line: all of them, refusals and errors
// only, or none; a reload changes it on the running front door.
func TestAccessLogLevels(t *testing.T) {
	var buf bytes.Buffer
	cfg := Config{Listen: "127.0.0.1:8443", Domain: "devices.example.com"}
	cfg.ApplyDefaults()
	s := &Server{cfg: cfg, log: slog.New(slog.NewTextHandler(&buf, nil))}
	s.limits.Store(&cfg)
	requests := func() int {
		buf.Reset()
		for _, r := range []struct {
			status int
			reason string
		}{{201, ""}, {200, ""}, {404, ""}, {0, ""}, {401, "bad token"}, {200, "refused before the answer"}} {
			s.logAccess(&accessEntry{start: time.Now(), device: "dev1", method: "POST", reason: r.reason}, &statusWriter{status: r.status})
		}
		return strings.Count(buf.String(), "msg=access")
	}
	for _, tc := range []struct {
		level string
		lines int
	}{{"", 6}, {AccessLogAll, 6}, {AccessLogErrors, 3}, {AccessLogOff, 0}} {
		next := cfg
		next.AccessLog = tc.level
		if _, err := s.Reconfigure(next); err != nil {
			t.Fatal(err)
		}
		if got := requests(); got != tc.lines {
			t.Errorf("access_log %q: %d lines, want %d:\n%s", tc.level, got, tc.lines, buf.String())
		}
	}
	bad := cfg
	bad.AccessLog = "some"
	if _, err := s.Reconfigure(bad); err == nil || !strings.Contains(err.Error(), "frontdoor.access_log") {
		t.Fatalf("an unknown access_log level: %v", err)
	}
}
