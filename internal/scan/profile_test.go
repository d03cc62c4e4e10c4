package scan

import "testing"

// What an endpoint accepts outside a profile is named, each item once; an endpoint
// within it complies (issue 55.4).
func TestCheckProfile(t *testing.T) {
	p := Profiles["mozilla-intermediate"]
	hub := &Report{Versions: []string{"TLS 1.2", "TLS 1.3"}, Groups: []string{"X25519MLKEM768", "X25519", "P-256", "P-384"},
		Suites: map[string][]string{"TLS 1.2": {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"}, "TLS 1.3": {"TLS_AES_128_GCM_SHA256"}}}
	CheckProfile(hub, p)
	if !has(findings(hub, Good, "profile"), "complies with mozilla-intermediate") {
		t.Fatalf("the hub's defaults: %+v", hub.Findings)
	}
	old := &Report{Versions: []string{"TLS 1.1", "TLS 1.2"}, Groups: []string{"X25519", "P-521"},
		Suites: map[string][]string{"TLS 1.1": {"ECDHE-ECDSA-AES128-SHA"}, "TLS 1.2": {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES128-SHA"}}}
	CheckProfile(old, p)
	if !has(findings(old, Weak, "profile"), "not in mozilla-intermediate: TLS 1.1, TLS 1.2 ECDHE-ECDSA-AES128-SHA, group P-521") {
		t.Fatalf("an old server: %+v", old.Findings)
	}
	modern := &Report{Versions: []string{"TLS 1.2", "TLS 1.3"}}
	CheckProfile(modern, Profiles["mozilla-modern"])
	if !has(findings(modern, Weak, "profile"), "not in mozilla-modern: TLS 1.2") {
		t.Fatalf("TLS 1.2 against modern: %+v", modern.Findings)
	}
	if _, err := ProfileByName("nist"); err == nil {
		t.Fatal("an unknown profile was taken")
	}
}
