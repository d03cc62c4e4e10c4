package e2e

import (
	"testing"
)

// 'iotsafe bench hubs --quick' checks the harness of the several-hubs lab: a scratch
// PostgreSQL server, three hubs in namespaces on one segment, real agents in another,
// every device answering through the last hub, the revocations timed, the first hub
// killed and every remaining device answering again, every file written, nothing left
// running (server, hubs, agents) and no namespace left. Times are not checked.
func TestBenchHubsQuick(t *testing.T) {
	needRoot(t)
	r := runBench(t, []string{"revokes.csv", "environment.json", "summary.json", "report.html"}, "hubs", "--quick")
	var s struct {
		Schema  string `json:"schema"`
		Devices int    `json:"devices"`
		Through struct {
			OK int `json:"answered"`
			N  int `json:"sockets"`
		} `json:"through_peer"`
		RevokeMS struct {
			N int `json:"n"`
		} `json:"revoke_ms"`
		RecoveryS float64 `json:"recovery_s"`
		Answered  int     `json:"answered"`
		Expected  int     `json:"expected"`
	}
	b := r.summary(t, &s)
	if s.Schema != "iotsafe.bench.hubs/1" || s.Devices != 5 || s.Through.N != 5 || s.Through.OK != 5 || s.RevokeMS.N != 2 {
		t.Fatalf("summary: %s", b)
	}
	if s.Expected != 3 || s.Answered != 3 || s.RecoveryS < 0 {
		t.Errorf("the killed hub's devices did not all come back through the others: %s", b)
	}
	r.nothingLeft(t, "iotsafe-hubs-sw", "iotsafe-hubs-h0", "iotsafe-hubs-dev")
}
