package e2e

import (
	"testing"
)

// 'iotsafe bench wssec --quick' checks paper 001's lab harness: every quick variant and
// case measured with answers verified, sizes and the 802.15.4 costs computed, the
// deflate sweep run, TLS record compression reported as not reproducible, every file
// written, nothing left running.
func TestBenchWSSecQuick(t *testing.T) {
	r := runBench(t, []string{"rtt.csv", "sizes.csv", "deflate.csv", "environment.json", "summary.json", "report.html"}, "wssec", "--quick")
	var s struct {
		Schema          string                                     `json:"schema"`
		RTT             map[string]map[string]float64              `json:"rtt_median_ms"`
		Air             map[string]map[string]struct{ Frames int } `json:"air_802154"`
		Deflate         []struct{ Level int }                      `json:"deflate"`
		Targets         map[string]bool                            `json:"targets_met"`
		NotReproducible map[string]string                          `json:"not_reproducible"`
	}
	if b := r.summary(t, &s); s.Schema != "iotsafe.bench.wssec/1" {
		t.Fatalf("summary: %s", b)
	}
	for _, v := range []string{"soap", "tls1.3-aes128-gcm", "csec-aes128-gcm", "secrec-aes128-gcm", "secrec-rc4-sha1"} {
		if len(s.RTT[v]) != 3 || s.RTT[v]["1"] <= 0 || s.Air[v]["1"].Frames == 0 {
			t.Errorf("%s: %v %v\n%s", v, s.RTT[v], s.Air[v], r.text)
		}
	}
	if len(s.Deflate) != 4 || len(s.Targets) != 3 || s.NotReproducible["tls_compression"] == "" {
		t.Errorf("deflate %v, targets %v, not reproducible %v", s.Deflate, s.Targets, s.NotReproducible)
	}
	r.nothingLeft(t)
}

// Over the emulated 802.15.4 link (root: the client and the server in two namespaces of
// the run's own): the frames are counted on the link, and both namespaces are gone after.
func TestBenchWSSecOver802154(t *testing.T) {
	r := runBench(t, []string{"summary.json", "report.html"}, "wssec", "--quick", "--link", "802154", "--no-deflate",
		"--variants", "soap,secrec-aes128-gcm", "--cases", "1", "--requests", "4")
	var s struct {
		Link        string                                     `json:"link"`
		AirMeasured bool                                       `json:"air_measured"`
		Air         map[string]map[string]struct{ Frames int } `json:"air_802154"`
	}
	r.summary(t, &s)
	if s.Link != "802154" || !s.AirMeasured || s.Air["secrec-aes128-gcm"]["1"].Frames <= s.Air["soap"]["1"].Frames {
		t.Fatalf("link run: %+v\n%s", s, r.text)
	}
	r.nothingLeft(t)
}
