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

// 'iotsafe bench mqtt connections --quick' checks the fleet experiment's harness: a
// fleet of TLS devices on the hub's broker and on Mosquitto (10,000 passwords hashed in
// one go), every reading acknowledged, memory read from both brokers (idle, publishing,
// idle again with every device still connected), every file, no
// process left. Memory figures are not checked beyond being read.
func TestBenchMQTTConnectionsQuick(t *testing.T) {
	needTool(t, "mosquitto")
	r := runBench(t, []string{"fleets.csv", "environment.json", "summary.json", "report.html"}, "mqtt", "connections", "--quick")
	var s struct {
		Schema string `json:"schema"`
		Fleets []struct {
			Broker                    string
			Clients, Connected, Acked int
			Failures                  int
			NoLoss                    bool `json:"no_loss"`
			Base, Idle, Quiet         struct{ PSS int64 }
		} `json:"fleets"`
	}
	b := r.summary(t, &s)
	if s.Schema != "iotsafe.bench.mqtt-connections/1" || len(s.Fleets) != 2 {
		t.Fatalf("summary: %s", b)
	}
	for _, f := range s.Fleets {
		if f.Connected != 50 || !f.NoLoss || f.Acked != 100 || f.Failures != 0 || f.Base.PSS <= 0 || f.Idle.PSS <= 0 || f.Quiet.PSS <= 0 {
			t.Errorf("%s: %+v\n%s", f.Broker, f, r.text)
		}
	}
	r.nothingLeft(t)
}
