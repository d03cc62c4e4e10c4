package e2e

import (
	"testing"
)

// 'iotsafe bench device --quick' runs every scheme over the emulated 802.15.4 link and
// writes its files; this checks the harness (files, schemes, cleanup), never the figures.
func TestBenchDeviceQuick(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"ip", "ssh", "/usr/sbin/sshd"} {
		needTool(t, tool)
	}
	r := runBench(t, []string{"device.csv", "environment.json", "summary.json", "report.html"}, "device", "--quick")
	var s struct {
		Efficiency map[string]map[string]float64 `json:"efficiency"`
		Skipped    map[string]string             `json:"skipped"`
	}
	r.summary(t, &s)
	for _, scheme := range []string{"plain", "https12", "https13", "iotsafe", "openssh", "openssh_c"} {
		for _, proto := range []string{"h1", "h2"} {
			if v := s.Efficiency[scheme+"_"+proto]["256"]; v <= 0 || v >= 1 {
				t.Errorf("efficiency %s_%s at 256 B = %v (skipped: %v)", scheme, proto, v, s.Skipped)
			}
		}
	}
	// Only this run's namespaces (named after its pid): other benches may be running.
	r.nothingLeft(t, "iotsafe-dev-gw", "iotsafe-dev-dev")
}
