package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// The 802.15.4 emulator carries a real TCP transfer between two namespaces it creates
// and removes: frames and link bytes are counted, the payload arrives whole, the model's
// ceiling is reported (its figures are not asserted: the machine is shared).
func TestLinkEmulation802154(t *testing.T) {
	needRoot(t)
	needTool(t, "ip")
	cmd := exec.Command(iotsafeBin, "bench", "link", "--link", "802154", "--bytes", "16384", "-o", "json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench link: %v\n%s", err, out)
	}
	var r struct {
		Bytes      int     `json:"bytes"`
		Goodput    float64 `json:"goodput_bps"`
		Ceiling    float64 `json:"model_ceiling_bps"`
		Frames     int64   `json:"frames"`
		LinkBytes  int64   `json:"link_bytes"`
		Efficiency float64 `json:"channel_efficiency"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 16 KiB need at least 16384/96 fragments on the air, each at most 127 + 6 bytes.
	if r.Bytes != 16384 || r.Goodput <= 0 || r.Ceiling <= 0 || r.Frames < 16384/96 || r.LinkBytes <= 16384 || r.Efficiency <= 0 || r.Efficiency >= 1 {
		t.Fatalf("result %+v", r)
	}
	// Only this run's namespaces (named after its pid): other benches may be running.
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), fmt.Sprintf("iotsafe-link-dev-%d", cmd.Process.Pid)) {
		t.Fatalf("namespaces left behind:\n%s", ns)
	}
	if _, err := exec.Command(iotsafeBin, "bench", "link", "--link", "carrier-pigeon").CombinedOutput(); err == nil {
		t.Fatal("an unknown link was accepted")
	}
}
