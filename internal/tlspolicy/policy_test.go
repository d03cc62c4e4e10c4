package tlspolicy

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"
)

func on(b bool) *bool { return &b }

// The zero policy: TLS 1.2-1.3, the six ECDHE AEAD suites, Go's groups but P-521 (issue
// 55.4), tickets on.
func TestDefaults(t *testing.T) {
	c, err := Policy{}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.MinVersion != tls.VersionTLS12 || c.MaxVersion != tls.VersionTLS13 || c.SessionTicketsDisabled ||
		!slices.Equal(c.CurvePreferences, []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256, tls.CurveP384}) {
		t.Fatalf("defaults: %+v", c)
	}
	if len(c.CipherSuites) != 6 {
		t.Fatalf("%d default suites, want the six ECDHE AEAD ones", len(c.CipherSuites))
	}
	for _, id := range c.CipherSuites {
		if name := tls.CipherSuiteName(id); strings.Contains(name, "CBC") || !strings.HasPrefix(name, "TLS_ECDHE_") {
			t.Errorf("default suite %s", name)
		}
	}
	if ins, err := (Policy{}).Check("frontdoor.tls"); err != nil || ins != nil {
		t.Fatalf("check of the default: %v %v", ins, err)
	}
}

// Operators name suites as OpenSSL does or as IANA does, in their order; groups as Go or
// OpenSSL spells them; versions with or without "TLSv".
func TestNamesAndOrder(t *testing.T) {
	c, err := Policy{MinVersion: "TLSv1.2", MaxVersion: "1.2",
		Suites:         []string{"ecdhe-rsa-chacha20-poly1305", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
		Groups:         []string{"X25519", "prime256v1"},
		SessionTickets: on(false)}.Config()
	if err != nil {
		t.Fatal(err)
	}
	want := []uint16{tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	if !slices.Equal(c.CipherSuites, want) || !slices.Equal(c.CurvePreferences, []tls.CurveID{tls.X25519, tls.CurveP256}) ||
		c.MaxVersion != tls.VersionTLS12 || !c.SessionTicketsDisabled {
		t.Fatalf("config %+v", c)
	}
}

// Each refusal names the setting and says why.
func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		p    Policy
		want string
	}{
		{Policy{Suites: []string{"DHE-RSA-AES128-GCM-SHA256"}}, "no finite-field Diffie-Hellman"},
		{Policy{Suites: []string{"TLS_AES_128_GCM_SHA256"}}, "TLS 1.3 suite"},
		{Policy{Suites: []string{"PSK-AES128-GCM-SHA256"}}, "pre-shared-key"},
		{Policy{Suites: []string{"NOPE"}}, "not a TLS 1.2 suite Go knows"},
		{Policy{TicketLifetime: 24}, "ticket_lifetime: 24ns is under a minute"},
		{Policy{TicketLifetime: 200 * time.Hour}, "ticket_lifetime: 200h0m0s is over 7 days"},
		{Policy{Suites: []string{"ECDHE-ECDSA-AES128-SHA"}}, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA is insecure"},
		{Policy{Suites: []string{"AES128-GCM-SHA256"}}, "insecure"},
		{Policy{Suites: []string{"ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}}, "listed twice"},
		{Policy{MinVersion: "1.1"}, "TLS 1.1 is insecure"},
		{Policy{MinVersion: "3"}, "not a TLS version"},
		{Policy{MinVersion: "1.3", MaxVersion: "1.2"}, "above max_version"},
		{Policy{Groups: []string{"ffdhe2048"}}, "not a group Go offers"},
		{Policy{Groups: []string{"X25519MLKEM768"}}, "only with TLS 1.3"},
	} {
		if _, err := c.p.Check("frontdoor.tls"); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "frontdoor.tls") {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
	// X25519MLKEM768 alone is fine where TLS 1.2 is off.
	if _, err := (Policy{MinVersion: "1.3", Groups: []string{"X25519MLKEM768"}}).Check("t"); err != nil {
		t.Fatal(err)
	}
}

// allow_insecure lets weak choices through and reports each one.
func TestAllowInsecureReports(t *testing.T) {
	p := Policy{MinVersion: "1.0", Suites: []string{"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES128-SHA"}, AllowInsecure: true}
	ins, err := p.Check("frontdoor.tls")
	if err != nil || !slices.Equal(ins, []string{"TLS 1.0", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"}) {
		t.Fatalf("insecure %v, %v", ins, err)
	}
	c, err := p.Config()
	if err != nil || c.MinVersion != tls.VersionTLS10 || len(c.CipherSuites) != 2 {
		t.Fatalf("config %+v %v", c, err)
	}
}
