package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// scrape serves m on a free loopback port and returns one scrape of /metrics, as
// Prometheus would read it.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := m.Serve(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// By default every device has its own series; per_device: false keeps the hub-wide
// ones only, so a fleet of 100,000 devices does not make each scrape about 15 MB.
func TestSeriesPerDevice(t *testing.T) {
	off := false
	for _, c := range []struct {
		cfg  Config
		want []string
		not  []string
	}{
		{Config{}, []string{`iotsafe_device_sessions{device="dev1"} 1`, `iotsafe_violations_total{device="dev1"} 2`, `iotsafe_device_last_seen_seconds{device="dev1"}`, "iotsafe_sessions 1"}, nil},
		{Config{PerDevice: &off}, []string{"iotsafe_violations_total 2", "iotsafe_sessions 1"}, []string{`device="`}},
	} {
		m := New(c.cfg)
		m.SessionOpened("dev1")
		m.Violation("dev1")
		m.Violation("dev1")
		got := scrape(t, m)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("per_device %v: no %q in the scrape", c.cfg.perDevice(), w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("per_device %v: %q in the scrape", c.cfg.perDevice(), n)
			}
		}
	}
}

// A removed device's series leave the scrape, even when its session's end is noted
// after the removal; another device's stay.
func TestForgetDropsARemovedDevicesSeries(t *testing.T) {
	m := New(Config{})
	for _, d := range []string{"dev1", "dev2"} {
		m.SessionOpened(d)
		m.Violation(d)
		m.SessionClosed(d)
	}
	m.SessionOpened("dev1")
	m.Forget("dev1")
	m.SessionClosed("dev1") // its session's end, noted after the removal
	got := scrape(t, m)
	if strings.Contains(got, `device="dev1"`) || strings.Count(got, `device="dev2"`) != 3 {
		t.Fatalf("after removing dev1:\n%s", got)
	}
}
