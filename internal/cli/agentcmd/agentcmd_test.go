package agentcmd

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent binary for devices stays the agent alone: cmd/iotsafe-agent pulls in
// nothing of the hub's (its registry, databases, broker, front door, lab), which would
// take it from about 6 MB to the full binary's 44 MB.
func TestAgentBinaryImportsNothingOfTheHub(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../../cmd/iotsafe-agent").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, hubOnly := range []string{"/internal/hub", "/internal/registry", "/internal/lab", "/internal/sshd",
			"/internal/telemetry", "/internal/mqttbroker", "/internal/frontdoor", "modernc.org/sqlite", "github.com/jackc/pgx",
			"github.com/mochi-mqtt", "github.com/prometheus"} {
			if strings.Contains(dep, hubOnly) {
				t.Errorf("iotsafe-agent depends on %s", dep)
			}
		}
	}
}
