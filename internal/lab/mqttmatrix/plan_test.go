package mqttmatrix

import (
	"strings"
	"testing"
)

// Each broker starts once per certificate type; Mosquitto once more per TLS 1.3 suite;
// DHE is listed as not run for every TLS broker, with why.
func TestPlan(t *testing.T) {
	o := Options{Brokers: []string{Mosquitto, Hub, SSH}, TLS: []string{"1.2", "1.3"}}
	var suites []suite
	for _, n := range []string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "AES128-SHA", "DHE-RSA-AES128-GCM-SHA256", "TLS-AES-256-GCM-SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
		s, err := parseSuite(n)
		if err != nil {
			t.Fatal(err)
		}
		suites = append(suites, s)
	}
	groups, skips := plan(o, suites)
	var got []string
	for _, g := range groups {
		d := g.broker
		if g.rsa {
			d += "/rsa"
		}
		if g.only13 != "" {
			d += "/" + g.only13
		}
		got = append(got, d)
	}
	want := "mosquitto/TLS_AES_256_GCM_SHA384 mosquitto/TLS_CHACHA20_POLY1305_SHA256 mosquitto mosquitto/rsa hub hub/rsa ssh"
	if strings.Join(got, " ") != want {
		t.Errorf("groups %v, want %s", got, want)
	}
	if len(skips) != 2 || skips[0].Suite != "DHE-RSA-AES128-GCM-SHA256" || !strings.Contains(skips[0].Reason, "DHE") {
		t.Errorf("skips %+v", skips)
	}
	if _, err := parseSuite("ECDHE-ECDSA-AES129-GCM-SHA256"); err == nil {
		t.Error("a misspelt suite was accepted")
	}
	if _, err := parseSuite("TLS_AES_128_CCM_SHA256"); err == nil {
		t.Error("a TLS 1.3 suite outside the paper's was accepted")
	}
	if err := (&Options{Links: []string{"carrier-pigeon"}}).defaults(); err == nil {
		t.Error("an unknown link was accepted")
	}
}
