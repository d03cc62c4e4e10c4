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
	r := runBench(t, []string{"connections.csv", "suites_groups.csv", "payload.csv", "primitives.csv", "environment.json", "summary.json", "report.html"}, "tls", "--quick")
	var s struct {
		Schema  string                                   `json:"schema"`
		AvgMs   map[string]map[string]map[string]float64 `json:"avg_ms"`
		Skipped map[string]string                        `json:"skipped"`
		Payload map[string]map[string]struct {
			PerSecond     float64 `json:"messages_per_second"`
			OverheadBytes float64 `json:"overhead_bytes_per_message"`
		} `json:"payload"`
		Primitives map[string]map[string]struct {
			Value float64 `json:"value"`
			Unit  string  `json:"unit"`
		} `json:"primitives"`
		SuitesGroups map[string]map[string]map[string]struct {
			Connections        int     `json:"connections"`
			BytesPerConnection float64 `json:"bytes_per_connection"`
		} `json:"suites_groups"`
	}
	if b := r.summary(t, &s); s.Schema != "iotsafe.bench.tls/1" {
		t.Fatalf("summary: %s", b)
	}
	all := []string{"full", "resume", "psk_ke", "psk_dhe_ke"}
	for impl, modes := range map[string][]string{"go": {"full", "resume", "full_mlkem"}, "go-tls12": {"full", "resume"}, "openssl": all, "wolfssl": all, "pion": all, "pion+cid": all, "wolfssl-dtls": all} {
		for _, m := range modes {
			if len(s.AvgMs[impl][m]) != 2 {
				t.Errorf("%s %s: %v\n%s", impl, m, s.AvgMs[impl][m], r.text)
			}
		}
	}
	if !strings.Contains(s.Skipped["go psk_ke"], "no external PSK") || !strings.Contains(s.Skipped["openssl full_mlkem"], "no ML-KEM") {
		t.Errorf("skipped: %v", s.Skipped)
	}
	// Figs. 3, 4: every suite x group a library can do was run (an ML-KEM ClientHello is
	// far larger), and what it cannot do says why.
	sg := s.SuitesGroups
	if sg["go"]["TLS_AES_128_GCM_SHA256"]["X25519MLKEM768"].BytesPerConnection <= 2*sg["go"]["TLS_AES_128_GCM_SHA256"]["X25519"].BytesPerConnection {
		t.Errorf("go suites x groups: %+v", sg["go"])
	}
	for _, impl := range []string{"openssl", "wolfssl"} {
		for _, suite := range []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
			if len(sg[impl][suite]) != 4 || sg[impl][suite]["P-521"].Connections == 0 {
				t.Errorf("%s %s: %+v", impl, suite, sg[impl][suite])
			}
		}
		if !strings.Contains(s.Skipped[impl+" TLS_AES_128_GCM_SHA256 X25519MLKEM768"], "unsupported group") {
			t.Errorf("%s ML-KEM: %q", impl, s.Skipped[impl+" TLS_AES_128_GCM_SHA256 X25519MLKEM768"])
		}
	}
	if !strings.Contains(s.Skipped["go TLS_CHACHA20_POLY1305_SHA256 X25519"], "chooses its TLS 1.3 suite itself") {
		t.Errorf("go's suite choice: %v", s.Skipped)
	}
	// Fig. 6: Go's TLS 1.3 adds 22 bytes to each record (header, content type, AES-GCM
	// tag); a large message early on a connection may take two (Go starts with small
	// records), so a little more on average.
	for _, size := range []string{"100", "1000", "2500", "5000", "10000"} {
		if c := s.Payload["go"][size]; c.PerSecond <= 0 || c.OverheadBytes < 22 || c.OverheadBytes > 30 {
			t.Errorf("payload %s: %+v", size, c)
		}
		// The C helpers echo too (their byte counts come from the kernel or BIO).
		for _, impl := range []string{"openssl", "wolfssl"} {
			if c := s.Payload[impl][size]; c.PerSecond <= 0 {
				t.Errorf("%s payload %s: %+v", impl, size, c)
			}
		}
	}
	// Fig. 2: Go's primitives, OpenSSL's through openssl speed, wolfCrypt's through the
	// helper.
	if len(s.Primitives["go"]) < 15 || s.Primitives["go"]["AES-128-GCM"].Unit != "MB/s" || s.Primitives["go"]["X25519"].Value <= 0 ||
		s.Primitives["openssl"]["AES-128-GCM"].Value <= 0 || s.Primitives["openssl"]["X25519"].Unit != "ops/s" ||
		len(s.Primitives["wolfssl"]) < 14 || s.Primitives["wolfssl"]["RSA-2048 sign"].Value <= 0 {
		t.Errorf("primitives: %+v", s.Primitives)
	}
	r.nothingLeft(t)
}

// Over the emulated 802.15.4 link (root; two namespaces of the run's own): Go's, pion's
// and the C helpers' handshakes (OpenSSL's TLS, wolfSSL's DTLS, over IPv6 there) cross
// it and each mode's frames are counted there; both namespaces are gone after.
func TestBenchTLSOver802154(t *testing.T) {
	r := runBench(t, []string{"summary.json", "report.html"}, "tls", "--link", "802154", "--impls", "go,pion,openssl,wolfssl-dtls", "--modes", "full,resume,full_mlkem", "--k", "2")
	var s struct {
		Link              string                                         `json:"link"`
		LinkPerConnection map[string]map[string]struct{ Frames float64 } `json:"link_per_connection"`
		Skipped           map[string]string                              `json:"skipped"`
	}
	r.summary(t, &s)
	// The hybrid post-quantum ClientHello costs frames a constrained device pays.
	if s.Link != "802154" || s.LinkPerConnection["go"]["full"].Frames < 10 || s.LinkPerConnection["pion"]["resume"].Frames == 0 ||
		s.LinkPerConnection["go"]["full_mlkem"].Frames <= s.LinkPerConnection["go"]["full"].Frames+8 ||
		s.LinkPerConnection["openssl"]["full"].Frames < 10 || s.LinkPerConnection["wolfssl-dtls"]["resume"].Frames == 0 {
		t.Fatalf("link run: %+v\n%s", s, r.text)
	}
	r.nothingLeft(t)
}
