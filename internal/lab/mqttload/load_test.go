package mqttload_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/mqttload"
)

// The load generator against a real Mosquitto (Debian's), over TLS with passwords:
// every QoS and both MQTT versions deliver every message; the suite the client asked
// for is the one recorded.
func TestLoadAgainstMosquitto(t *testing.T) {
	if _, err := exec.LookPath("mosquitto"); err != nil {
		t.Fatal("mosquitto is not installed: run scripts/setup.sh")
	}
	dir := t.TempDir()
	cert, key, client, err := lab.WriteCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]string{}
	for i := range 3 {
		users[fmt.Sprintf("u%d", i)] = fmt.Sprintf("secret-%d", i)
	}
	m, err := lab.StartMosquitto(context.Background(), filepath.Join(dir, "mosquitto"), lab.MosquittoOpts{CertFile: cert, KeyFile: key, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ident := func(pw string) func(int) mqttload.Identity {
		return func(i int) mqttload.Identity {
			u := fmt.Sprintf("u%d", i)
			p := users[u]
			if pw != "" {
				p = pw
			}
			return mqttload.Identity{ClientID: u, Username: u, Password: []byte(p), Topic: "bench/" + u}
		}
	}
	for _, version := range []byte{4, 5} {
		for qos := range byte(3) {
			t.Run(fmt.Sprintf("v%d-qos%d", version, qos), func(t *testing.T) {
				tc := client.Clone()
				tc.MaxVersion = tls.VersionTLS12
				tc.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}
				r, err := mqttload.Run(context.Background(), mqttload.Options{Addr: m.Addr, Clients: 3, Messages: 20, QoS: qos, Version: version, TLS: tc, Identity: ident("")})
				if err != nil {
					t.Fatal(err)
				}
				if r.Totals.Successes != 60 || r.Totals.Failures != 0 || r.Totals.Ratio != 1 {
					t.Fatalf("successes %d, failures %d, ratio %v: %v", r.Totals.Successes, r.Totals.Failures, r.Totals.Ratio, r.Errors)
				}
				if r.TLSVersion != "TLS 1.2" || r.TLSSuite != "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" {
					t.Fatalf("negotiated %s %s", r.TLSVersion, r.TLSSuite)
				}
				tt := r.Totals
				if tt.TotalMsgsPerSec <= 0 || tt.MsgTimeMin > tt.MsgTimeMeanAvg || tt.MsgTimeMeanAvg > tt.MsgTimeMax || tt.P[0] > tt.P[2] || tt.P[2] > tt.P[4] {
					t.Fatalf("inconsistent totals: %+v", tt)
				}
			})
		}
	}
	// A wrong password: every message of every client fails, with the broker's reason.
	r, err := mqttload.Run(context.Background(), mqttload.Options{Addr: m.Addr, Clients: 3, Messages: 5, QoS: 1, TLS: client, Identity: ident("wrong")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Totals.Successes != 0 || r.Totals.Failures != 15 || r.Totals.Ratio != 0 || len(r.Errors) != 1 {
		t.Fatalf("wrong password: %+v %v", r.Totals, r.Errors)
	}
	for e := range r.Errors {
		if !strings.Contains(e, "refused") {
			t.Fatalf("error %q does not say the broker refused", e)
		}
	}
}
