package e2e

import (
	"strings"
	"testing"
)

// 'iotsafe bench tls --quick' checks the TLS lab's harness: the OpenSSL and wolfSSL
// helpers are built from source against Debian's libraries, every implementation's
// server and client (pion/dtls's DTLS 1.2 with and without connection IDs too) run every
// mode,
// resumption and PSK really resume (the bench refuses a run that would measure full
// handshakes), Go's missing external PSK is listed with why, every file is written.
func TestBenchTLSQuick(t *testing.T) {
	needTool(t, "cc")
	r := runBench(t, []string{"connections.csv", "environment.json", "summary.json", "report.html"}, "tls", "--quick")
	var s struct {
		Schema  string                                   `json:"schema"`
		AvgMs   map[string]map[string]map[string]float64 `json:"avg_ms"`
		Skipped map[string]string                        `json:"skipped"`
	}
	if b := r.summary(t, &s); s.Schema != "iotsafe.bench.tls/1" {
		t.Fatalf("summary: %s", b)
	}
	all := []string{"full", "resume", "psk_ke", "psk_dhe_ke"}
	for impl, modes := range map[string][]string{"go": {"full", "resume"}, "openssl": all, "wolfssl": all, "pion": all, "pion+cid": all} {
		for _, m := range modes {
			if len(s.AvgMs[impl][m]) != 2 {
				t.Errorf("%s %s: %v\n%s", impl, m, s.AvgMs[impl][m], r.text)
			}
		}
	}
	if !strings.Contains(s.Skipped["go psk_ke"], "no external PSK") {
		t.Errorf("skipped: %v", s.Skipped)
	}
	r.nothingLeft(t)
}
