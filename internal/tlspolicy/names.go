package tlspolicy

import (
	"crypto/tls"
	"slices"
	"strings"
)

// openSSLNames maps OpenSSL's names of the TLS 1.2 suites Go implements to Go's (IANA)
// names; operators and Mosquitto configs use the former.
var openSSLNames = map[string]string{
	"ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"ECDHE-RSA-AES128-GCM-SHA256":   "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"ECDHE-RSA-AES256-GCM-SHA384":   "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
	"ECDHE-RSA-CHACHA20-POLY1305":   "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
	"ECDHE-ECDSA-AES128-SHA":        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
	"ECDHE-RSA-AES128-SHA":          "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
	"ECDHE-ECDSA-AES256-SHA":        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
	"ECDHE-RSA-AES256-SHA":          "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
	"ECDHE-ECDSA-AES128-SHA256":     "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
	"ECDHE-RSA-AES128-SHA256":       "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
	"AES128-GCM-SHA256":             "TLS_RSA_WITH_AES_128_GCM_SHA256",
	"AES256-GCM-SHA384":             "TLS_RSA_WITH_AES_256_GCM_SHA384",
	"AES128-SHA":                    "TLS_RSA_WITH_AES_128_CBC_SHA",
	"AES256-SHA":                    "TLS_RSA_WITH_AES_256_CBC_SHA",
	"AES128-SHA256":                 "TLS_RSA_WITH_AES_128_CBC_SHA256",
	"ECDHE-RSA-DES-CBC3-SHA":        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
	"DES-CBC3-SHA":                  "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
	"ECDHE-ECDSA-RC4-SHA":           "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
	"ECDHE-RSA-RC4-SHA":             "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
	"RC4-SHA":                       "TLS_RSA_WITH_RC4_128_SHA",
}

// suiteByName finds a TLS 1.2 suite Go implements by its IANA or OpenSSL name (any
// case); TLS 1.3 suites are not found (Go does not let them be chosen).
func suiteByName(name string) (*tls.CipherSuite, bool) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if iana, ok := openSSLNames[n]; ok {
		n = iana
	}
	for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, s := range list {
			if s.Name == n && slices.Contains(s.SupportedVersions, tls.VersionTLS12) {
				return s, true
			}
		}
	}
	return nil, false
}

// secureSuite reports whether a TLS 1.2 suite is one the policy allows without
// allow_insecure: ECDHE key exchange (forward secrecy) and an AEAD cipher.
func secureSuite(s *tls.CipherSuite) bool {
	return strings.HasPrefix(s.Name, "TLS_ECDHE_") && (strings.Contains(s.Name, "_GCM_") || strings.Contains(s.Name, "CHACHA20_POLY1305"))
}

// why explains a name Go cannot offer: the families it lacks, or "unknown".
func why(name string) string {
	n := strings.ToUpper(name)
	switch {
	case strings.HasPrefix(n, "TLS_AES_") || strings.HasPrefix(n, "TLS_CHACHA20_"):
		return "a TLS 1.3 suite: Go offers all three TLS 1.3 suites always and cannot choose among them"
	case strings.HasPrefix(n, "DHE-") || strings.HasPrefix(n, "EDH-") || strings.HasPrefix(n, "TLS_DHE_"):
		return "Go's TLS has no finite-field Diffie-Hellman (DHE) suites"
	case strings.Contains(n, "PSK"):
		return "Go's TLS has no pre-shared-key suites"
	case strings.Contains(n, "CCM") || strings.Contains(n, "ARIA") || strings.Contains(n, "CAMELLIA"):
		return "Go's TLS does not implement this cipher"
	}
	return "not a TLS 1.2 suite Go knows (OpenSSL or IANA names, e.g. ECDHE-ECDSA-AES128-GCM-SHA256)"
}

// groups maps key-exchange group names (Go's and OpenSSL's spellings) to Go's IDs.
var groups = map[string]tls.CurveID{
	"X25519MLKEM768": tls.X25519MLKEM768,
	"X25519":         tls.X25519,
	"P-256":          tls.CurveP256, "PRIME256V1": tls.CurveP256, "SECP256R1": tls.CurveP256,
	"P-384": tls.CurveP384, "SECP384R1": tls.CurveP384,
	"P-521": tls.CurveP521, "SECP521R1": tls.CurveP521,
}

// versions maps version names to Go's constants; true marks the insecure ones.
var versions = map[string]struct {
	v        uint16
	insecure bool
}{
	"1.0": {tls.VersionTLS10, true}, "1.1": {tls.VersionTLS11, true},
	"1.2": {tls.VersionTLS12, false}, "1.3": {tls.VersionTLS13, false},
}

func parseVersion(s string) (uint16, bool, bool) {
	s = strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "tlsv"), "tls")
	v, ok := versions[strings.TrimSpace(s)]
	return v.v, v.insecure, ok
}
