package e2e

import (
	"testing"
)

// 'iotsafe bench hub --only registry --quick' checks the registry part's harness: a
// scratch PostgreSQL server and a hub on each registry start and stop, every admin
// operation, session pass and notification figure is timed on both, every file is written, nothing is left
// running (the PostgreSQL server included). Rates are not checked.
func TestBenchRegistryQuick(t *testing.T) {
	r := runBench(t, []string{"registry.csv", "environment.json", "summary.json", "report.html"},
		"hub", "--only", "registry", "--quick", "--registry-devices", "10")
	var s struct {
		Schema    string                        `json:"schema"`
		Devices   int                           `json:"devices"`
		PerSecond map[string]map[string]float64 `json:"per_second"`
		Ratios    map[string]float64            `json:"postgres_over_sqlite"`
	}
	b := r.summary(t, &s)
	if s.Schema != "iotsafe.bench.registry/1" || s.Devices != 10 {
		t.Fatalf("summary: %s", b)
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, m := range []string{"session_setup", "admin_device_add", "admin_device_add_parallel", "admin_device_show", "admin_grant", "admin_revoke", "notifications_append"} {
			if s.PerSecond[backend][m] <= 0 {
				t.Errorf("%s %s not measured: %s", backend, m, b)
			}
		}
	}
	if s.PerSecond["postgres"]["notifications_append_two_hubs"] <= 0 {
		t.Errorf("two hubs sharing the notification store not measured: %s", b)
	}
	if _, ok := s.Ratios["session_setup"]; !ok {
		t.Errorf("no session setup ratio: %s", b)
	}
	r.nothingLeft(t)
}
