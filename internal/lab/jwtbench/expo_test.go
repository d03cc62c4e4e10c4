package jwtbench

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The lab reads what the hub's own metrics library writes: a histogram by route (whose
// label holds braces and slashes) as its _sum and _count, a counter as its value.
func TestParseExpositionReadsTheHubsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "iotsafe_rest_request_seconds", Help: "x"}, []string{"route"})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_rest_notifications_stored_total", Help: "a \"quoted\" help\nline"})
	reg.MustRegister(h, c)
	h.WithLabelValues(insertRoute).Observe(0.25)
	h.WithLabelValues(insertRoute).Observe(0.5)
	h.WithLabelValues(`GET /weird "route" \ {x}`).Observe(9)
	c.Add(42)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	samples, err := parseExposition(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range samples {
		if s.labels["route"] == insertRoute || s.labels["route"] == "" {
			got[s.name] += s.value
		}
		if s.labels["route"] == `GET /weird "route" \ {x}` && s.name == "iotsafe_rest_request_seconds_count" && s.value != 1 {
			t.Errorf("the escaped route's count: %v", s.value)
		}
	}
	if got["iotsafe_rest_request_seconds_count"] != 2 || got["iotsafe_rest_request_seconds_sum"] != 0.75 || got["iotsafe_rest_notifications_stored_total"] != 42 {
		t.Fatalf("read %v", got)
	}
}

func TestParseExpositionRefusesMalformedLines(t *testing.T) {
	for _, bad := range []string{"name", `name{route="x} 1`, `name{route=x} 1`, "name one", "name 1 2 3"} {
		if _, err := parseExposition(strings.NewReader(bad + "\n")); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func FuzzParseExposition(f *testing.F) {
	f.Add("# HELP x y\n# TYPE x counter\nx 1\n")
	f.Add(`iotsafe_rest_request_seconds_sum{route="POST /api/rest/device/{id}/notification"} 0.75` + "\n")
	f.Add(`a{b="\"\\\n"} 1 1700000000000` + "\n")
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := parseExposition(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, s := range samples {
			if s.name == "" || strings.ContainsAny(s.name, "{ \t") {
				t.Fatalf("sample name %q", s.name)
			}
		}
	})
}
