package scan

import "strings"

// Suite is a cipher suite the scan knows, with what makes it weak.
type Suite struct {
	ID      uint16
	Name    string // IANA
	OpenSSL string // OpenSSL's name ("" if OpenSSL has none)
}

// suites12 are the TLS 1.0-1.2 suites the scan offers (and SSL 3.0's): every suite a
// server of the last twenty years may still accept, the broken ones first of all.
var suites12 = []Suite{
	{0xc02b, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
	{0xc02c, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
	{0xc02f, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
	{0xc030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
	{0xcca9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
	{0xcca8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
	{0xc0ac, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM", "ECDHE-ECDSA-AES128-CCM"},
	{0xc0ad, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM", "ECDHE-ECDSA-AES256-CCM"},
	{0x009e, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "DHE-RSA-AES128-GCM-SHA256"},
	{0x009f, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"},
	{0xccaa, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "DHE-RSA-CHACHA20-POLY1305"},
	{0xc09e, "TLS_DHE_RSA_WITH_AES_128_CCM", "DHE-RSA-AES128-CCM"},
	{0xc09f, "TLS_DHE_RSA_WITH_AES_256_CCM", "DHE-RSA-AES256-CCM"},
	{0xc023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "ECDHE-ECDSA-AES128-SHA256"},
	{0xc024, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384", "ECDHE-ECDSA-AES256-SHA384"},
	{0xc027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"},
	{0xc028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"},
	{0xc009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
	{0xc00a, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
	{0xc013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
	{0xc014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
	{0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", "DHE-RSA-AES128-SHA256"},
	{0x006b, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", "DHE-RSA-AES256-SHA256"},
	{0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA", "DHE-RSA-AES128-SHA"},
	{0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA", "DHE-RSA-AES256-SHA"},
	{0x009c, "TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
	{0x009d, "TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
	{0x003c, "TLS_RSA_WITH_AES_128_CBC_SHA256", "AES128-SHA256"},
	{0x003d, "TLS_RSA_WITH_AES_256_CBC_SHA256", "AES256-SHA256"},
	{0x002f, "TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
	{0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
	{0x0041, "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA", "CAMELLIA128-SHA"},
	{0x0084, "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA", "CAMELLIA256-SHA"},
	{0x0096, "TLS_RSA_WITH_SEED_CBC_SHA", "SEED-SHA"},
	{0xc05c, "TLS_ECDHE_ECDSA_WITH_ARIA_128_GCM_SHA256", "ECDHE-ECDSA-ARIA128-GCM-SHA256"},
	{0xc05d, "TLS_ECDHE_ECDSA_WITH_ARIA_256_GCM_SHA384", "ECDHE-ECDSA-ARIA256-GCM-SHA384"},
	{0xc060, "TLS_ECDHE_RSA_WITH_ARIA_128_GCM_SHA256", "ECDHE-ARIA128-GCM-SHA256"},
	{0xc061, "TLS_ECDHE_RSA_WITH_ARIA_256_GCM_SHA384", "ECDHE-ARIA256-GCM-SHA384"},
	{0xc052, "TLS_DHE_RSA_WITH_ARIA_128_GCM_SHA256", "DHE-RSA-ARIA128-GCM-SHA256"},
	{0xc053, "TLS_DHE_RSA_WITH_ARIA_256_GCM_SHA384", "DHE-RSA-ARIA256-GCM-SHA384"},
	{0xc0ae, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"},
	{0xc0af, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8", "ECDHE-ECDSA-AES256-CCM8"},
	{0xc0a2, "TLS_DHE_RSA_WITH_AES_128_CCM_8", "DHE-RSA-AES128-CCM8"},
	{0xc0a3, "TLS_DHE_RSA_WITH_AES_256_CCM_8", "DHE-RSA-AES256-CCM8"},
	{0xc072, "TLS_ECDHE_ECDSA_WITH_CAMELLIA_128_CBC_SHA256", "ECDHE-ECDSA-CAMELLIA128-SHA256"},
	{0xc073, "TLS_ECDHE_ECDSA_WITH_CAMELLIA_256_CBC_SHA384", "ECDHE-ECDSA-CAMELLIA256-SHA384"},
	{0xc076, "TLS_ECDHE_RSA_WITH_CAMELLIA_128_CBC_SHA256", "ECDHE-RSA-CAMELLIA128-SHA256"},
	{0xc077, "TLS_ECDHE_RSA_WITH_CAMELLIA_256_CBC_SHA384", "ECDHE-RSA-CAMELLIA256-SHA384"},
	{0x00be, "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA256", "DHE-RSA-CAMELLIA128-SHA256"},
	{0x00c4, "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA256", "DHE-RSA-CAMELLIA256-SHA256"},
	{0x0045, "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA", "DHE-RSA-CAMELLIA128-SHA"},
	{0x0088, "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA", "DHE-RSA-CAMELLIA256-SHA"},
	{0xc09c, "TLS_RSA_WITH_AES_128_CCM", "AES128-CCM"},
	{0xc09d, "TLS_RSA_WITH_AES_256_CCM", "AES256-CCM"},
	{0xc0a0, "TLS_RSA_WITH_AES_128_CCM_8", "AES128-CCM8"},
	{0xc0a1, "TLS_RSA_WITH_AES_256_CCM_8", "AES256-CCM8"},
	{0xc050, "TLS_RSA_WITH_ARIA_128_GCM_SHA256", "ARIA128-GCM-SHA256"},
	{0xc051, "TLS_RSA_WITH_ARIA_256_GCM_SHA384", "ARIA256-GCM-SHA384"},
	{0x00ba, "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA256", "CAMELLIA128-SHA256"},
	{0x00c0, "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA256", "CAMELLIA256-SHA256"},
	{0xc012, "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "ECDHE-RSA-DES-CBC3-SHA"},
	{0xc008, "TLS_ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA", "ECDHE-ECDSA-DES-CBC3-SHA"},
	{0x0016, "TLS_DHE_RSA_WITH_3DES_EDE_CBC_SHA", "DHE-RSA-DES-CBC3-SHA"},
	{0x000a, "TLS_RSA_WITH_3DES_EDE_CBC_SHA", "DES-CBC3-SHA"},
	{0xc011, "TLS_ECDHE_RSA_WITH_RC4_128_SHA", "ECDHE-RSA-RC4-SHA"},
	{0xc007, "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "ECDHE-ECDSA-RC4-SHA"},
	{0x0005, "TLS_RSA_WITH_RC4_128_SHA", "RC4-SHA"},
	{0x0004, "TLS_RSA_WITH_RC4_128_MD5", "RC4-MD5"},
	{0x0015, "TLS_DHE_RSA_WITH_DES_CBC_SHA", "EDH-RSA-DES-CBC-SHA"},
	{0x0009, "TLS_RSA_WITH_DES_CBC_SHA", "DES-CBC-SHA"},
	{0x0014, "TLS_DHE_RSA_EXPORT_WITH_DES40_CBC_SHA", "EXP-EDH-RSA-DES-CBC-SHA"},
	{0x0008, "TLS_RSA_EXPORT_WITH_DES40_CBC_SHA", "EXP-DES-CBC-SHA"},
	{0x0003, "TLS_RSA_EXPORT_WITH_RC4_40_MD5", "EXP-RC4-MD5"},
	{0x0034, "TLS_DH_anon_WITH_AES_128_CBC_SHA", "ADH-AES128-SHA"},
	{0x00a6, "TLS_DH_anon_WITH_AES_128_GCM_SHA256", "ADH-AES128-GCM-SHA256"},
	{0xc018, "TLS_ECDH_anon_WITH_AES_128_CBC_SHA", "AECDH-AES128-SHA"},
	{0x006c, "TLS_DH_anon_WITH_AES_128_CBC_SHA256", "ADH-AES128-SHA256"},
	{0x006d, "TLS_DH_anon_WITH_AES_256_CBC_SHA256", "ADH-AES256-SHA256"},
	{0x003a, "TLS_DH_anon_WITH_AES_256_CBC_SHA", "ADH-AES256-SHA"},
	{0x00a7, "TLS_DH_anon_WITH_AES_256_GCM_SHA384", "ADH-AES256-GCM-SHA384"},
	{0x0046, "TLS_DH_anon_WITH_CAMELLIA_128_CBC_SHA", "ADH-CAMELLIA128-SHA"},
	{0x0089, "TLS_DH_anon_WITH_CAMELLIA_256_CBC_SHA", "ADH-CAMELLIA256-SHA"},
	{0x00bf, "TLS_DH_anon_WITH_CAMELLIA_128_CBC_SHA256", "ADH-CAMELLIA128-SHA256"},
	{0x00c5, "TLS_DH_anon_WITH_CAMELLIA_256_CBC_SHA256", "ADH-CAMELLIA256-SHA256"},
	{0xc019, "TLS_ECDH_anon_WITH_AES_256_CBC_SHA", "AECDH-AES256-SHA"},
	{0xc015, "TLS_ECDH_anon_WITH_NULL_SHA", "AECDH-NULL-SHA"},
	{0xc006, "TLS_ECDHE_ECDSA_WITH_NULL_SHA", "ECDHE-ECDSA-NULL-SHA"},
	{0xc010, "TLS_ECDHE_RSA_WITH_NULL_SHA", "ECDHE-RSA-NULL-SHA"},
	{0x003b, "TLS_RSA_WITH_NULL_SHA256", "NULL-SHA256"},
	{0x0002, "TLS_RSA_WITH_NULL_SHA", "NULL-SHA"},
	{0x0001, "TLS_RSA_WITH_NULL_MD5", "NULL-MD5"},
}

// suites13 are TLS 1.3's five suites.
var suites13 = []Suite{
	{0x1301, "TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"},
	{0x1302, "TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"},
	{0x1303, "TLS_CHACHA20_POLY1305_SHA256", "TLS_CHACHA20_POLY1305_SHA256"},
	{0x1304, "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_SHA256"},
	{0x1305, "TLS_AES_128_CCM_8_SHA256", "TLS_AES_128_CCM_8_SHA256"},
}

// ids are the suites' code points.
// Whose order of preference picks the suite, found by suiteOrder.
const (
	orderUnknown = iota // fewer than two suites to compare, or no answer
	orderServer         // the server's own order, whatever the client lists first
	orderClient         // the client's: the first suite it lists that the server accepts
)

// suiteOrder tells whose order picks the suite: it offers two suites the server
// accepted, its least preferred of the two first, and sees which one it takes (choose
// makes one handshake). ChaCha20 suites are left out: Go and OpenSSL may put them first
// for a client that lists them first (one without AES hardware), an order of their own
// that would look like the client's.
func suiteOrder(accepted []Suite, choose func(offer []uint16) (uint16, bool)) int {
	var pair []Suite
	for _, s := range accepted {
		if !strings.Contains(s.Name, "CHACHA20") {
			pair = append(pair, s)
		}
		if len(pair) == 2 {
			break
		}
	}
	if len(pair) < 2 {
		return orderUnknown
	}
	switch got, ok := choose([]uint16{pair[1].ID, pair[0].ID}); {
	case !ok:
		return orderUnknown
	case got == pair[0].ID:
		return orderServer
	case got == pair[1].ID:
		return orderClient
	}
	return orderUnknown
}

// reportOrder adds the suites found for version (names, in the order found) and whose
// order picks among them. A server that takes the client's order gives a client that
// lists a weaker suite first that suite, whatever the server prefers (testssl.sh's "NOT
// a cipher order configured").
func reportOrder(r *Report, version string, order int, names []string) {
	switch order {
	case orderClient:
		r.add("suites", Info, "%s, in the order of the scan's offers: %s", version, strings.Join(names, " "))
		r.add("suites", Weak, "%s: the server takes the client's order of preference, not its own: a client that lists a weaker suite first gets it", version)
	default:
		r.add("suites", Info, "%s, in the server's order: %s", version, strings.Join(names, " "))
	}
}

func ids(ss []Suite) []uint16 {
	out := make([]uint16, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

// Rate says how bad a suite is and why: Insecure (broken: no encryption, no
// authentication, export strength, RC4, DES, MD5), Weak (3DES, no forward secrecy, CBC
// with HMAC), Good otherwise (AEAD with forward secrecy). TLS 1.3 suites are good, but
// CCM_8's 64-bit tag is weak.
func Rate(s Suite) (Severity, string) {
	n := s.Name
	switch {
	case strings.Contains(n, "_NULL_"):
		return Insecure, "no encryption"
	case strings.Contains(n, "_anon_"):
		return Insecure, "no authentication of the server (anonymous key exchange)"
	case strings.Contains(n, "EXPORT"):
		return Insecure, "export-grade (FREAK, Logjam)"
	case strings.Contains(n, "_RC4_"):
		return Insecure, "RC4 (RFC 7465 forbids it)"
	case strings.Contains(n, "_DES_CBC_") || strings.Contains(n, "DES40"):
		return Insecure, "single DES (56-bit key)"
	case strings.HasSuffix(n, "_MD5"):
		return Insecure, "MD5 MAC"
	case strings.Contains(n, "3DES"):
		return Weak, "3DES: 64-bit blocks (Sweet32)"
	case strings.HasPrefix(n, "TLS_PSK_"):
		return Weak, "pre-shared key without (EC)DHE: no forward secrecy"
	case strings.HasPrefix(n, "TLS_RSA_"):
		return Weak, "RSA key exchange: no forward secrecy (and Bleichenbacher-style attacks)"
	case strings.Contains(n, "CCM_8"):
		return Weak, "8-byte authentication tag"
	case strings.Contains(n, "_CBC_"):
		return Weak, "CBC with HMAC (MAC-then-encrypt: Lucky13-class padding oracles)"
	}
	return Good, ""
}
