package e2e

import (
	"testing"
)

// 'iotsafe bench scale --quick' checks the gateway lab's harness: a centre and two
// gateway hubs in namespaces of their own, each gateway's simulated devices relayed to
// the centre and reached there, direct devices beside them, a gateway and the centre
// restarted with every device answering again on the same address, every file written,
// nothing left. Its figures are not checked.
func TestBenchScaleQuick(t *testing.T) {
	needRoot(t)
	r := runBench(t, []string{"paths.csv", "environment.json", "summary.json", "report.html"}, "scale", "--quick")
	var s struct {
		Schema      string `json:"schema"`
		Established struct {
			Behind int `json:"behind_gateways"`
			Direct int `json:"direct"`
		} `json:"established"`
		First struct {
			Devices, Answered int
		} `json:"first_sweep"`
		Paths []struct {
			Errors int64 `json:"errors"`
		} `json:"paths"`
		Recoveries []struct {
			What    string  `json:"what"`
			BackS   float64 `json:"back_s"`
			Devices int     `json:"devices"`
			Moved   int     `json:"moved"`
		} `json:"recoveries"`
	}
	b := r.summary(t, &s)
	if s.Schema != "iotsafe.bench.scale/1" || s.Established.Behind != 10 || s.Established.Direct != 5 ||
		s.First.Devices != 15 || s.First.Answered != 15 || len(s.Paths) != 2 || len(s.Recoveries) != 2 {
		t.Fatalf("summary: %s\n%s", b, r.text)
	}
	for _, rc := range s.Recoveries {
		if rc.BackS < 0 || rc.Moved != 0 {
			t.Errorf("after the %s restart not every device answered on its address: %s", rc.What, b)
		}
	}
	r.nothingLeft(t, "iotsafe-scale-c", "iotsafe-scale-g0", "iotsafe-scale-g1")
}
