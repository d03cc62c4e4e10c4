package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// 'iotsafe bench mqtt --quick' checks the MQTT lab's harness: a real Mosquitto as the
// centre, a hub with its bridge, real mosquitto_pub devices and a mosquitto_sub reader,
// the centre stopped and started again, every output file written and no process left.
// What a quick run measures is not checked, except that every reading arrived: the
// centre is stopped cleanly (SIGTERM), so a loss would be the bridge's.
func TestBenchMQTTQuick(t *testing.T) {
	needTool(t, "mosquitto")
	out := filepath.Join(t.TempDir(), "mqtt")
	cmd := exec.Command(iotsafeBin, "bench", "mqtt", "--quick", "--out", out)
	tag := fmt.Sprintf("IOTSAFE_TEST_RUN=mqttbench-%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd.Env = append(os.Environ(), tag)
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench mqtt: %v\n%s", err, text)
	}
	for _, f := range []string{"outages.csv", "environment.json", "summary.json", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	var s struct {
		Bridge struct {
			Messages, Published, Received, Lost int
			Outages                             int       `json:"outages"`
			FlowAgain                           []float64 `json:"flow_again_s"`
		} `json:"bridge"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary.json: %v\n%s", err, b)
	}
	if br := s.Bridge; br.Messages != 300 || br.Published != 300 || br.Received != 300 || br.Lost != 0 || len(br.FlowAgain) != 1 {
		t.Fatalf("summary: %s\n%s", b, text)
	}
	if left := processesWithEnv(tag); len(left) > 0 {
		t.Errorf("processes of the run left behind: %v", left)
	}
}
