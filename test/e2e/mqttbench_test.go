package e2e

import (
	"testing"
)

// 'iotsafe bench mqtt --quick' checks the MQTT lab's harness: a real Mosquitto as the
// centre, a hub with its bridge, real mosquitto_pub devices and a mosquitto_sub reader,
// the centre stopped and started again, every output file written and no process left.
// What a quick run measures is not checked, except that every reading arrived: the
// centre is stopped cleanly (SIGTERM), so a loss would be the bridge's.
func TestBenchMQTTQuick(t *testing.T) {
	needTool(t, "mosquitto")
	r := runBench(t, []string{"outages.csv", "environment.json", "summary.json", "report.html"}, "mqtt", "--quick")
	var s struct {
		Bridge struct {
			Messages, Published, Received, Lost int
			Outages                             int       `json:"outages"`
			FlowAgain                           []float64 `json:"flow_again_s"`
		} `json:"bridge"`
	}
	b := r.summary(t, &s)
	if br := s.Bridge; br.Messages != 300 || br.Published != 300 || br.Received != 300 || br.Lost != 0 || len(br.FlowAgain) != 1 {
		t.Fatalf("summary: %s\n%s", b, r.text)
	}
	r.nothingLeft(t)
}
