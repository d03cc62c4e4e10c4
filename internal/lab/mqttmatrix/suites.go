package mqttmatrix

import (
	"fmt"
	"strings"

	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// PaperSuites12 are the TLS 1.2 suites of paper 002: table 1 and the CBC and RSA
// key-exchange suites its table 2 and figures name. OpenSSL spellings.
var PaperSuites12 = []string{
	"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
	"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
	"DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384", "DHE-RSA-CHACHA20-POLY1305",
	"ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "DHE-RSA-AES128-SHA",
	"AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA", "AES256-SHA",
}

// PaperSuites13 are TLS 1.3's three suites (table 1).
var PaperSuites13 = []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}

// suite is one cipher suite of the matrix.
type suite struct {
	Name  string // OpenSSL name (TLS 1.2) or IANA name (TLS 1.3)
	TLS13 bool
	// RSA: the server authenticates with an RSA certificate (ECDHE-RSA, DHE-RSA, RSA key
	// exchange); else ECDSA. TLS 1.3 suites do not depend on the certificate: ECDSA.
	RSA bool
	// GoMissing says why Go's crypto/tls (the load generator's and the hub's) cannot
	// offer it; "" when it can.
	GoMissing string
}

// parseSuite accepts OpenSSL names and, for TLS 1.3, IANA names with '_' or '-'.
func parseSuite(name string) (suite, error) {
	up := strings.ToUpper(strings.TrimSpace(name))
	if strings.HasPrefix(up, "TLS_") || strings.HasPrefix(up, "TLS-") {
		n := strings.ReplaceAll(up, "-", "_")
		for _, s := range PaperSuites13 {
			if s == n {
				return suite{Name: n, TLS13: true}, nil
			}
		}
		return suite{}, fmt.Errorf("unknown TLS 1.3 suite %q: TLS 1.3 has %s", name, strings.Join(PaperSuites13, ", "))
	}
	s := suite{Name: up, RSA: !strings.Contains(up, "ECDSA")}
	p := tlspolicy.Policy{MinVersion: "1.2", MaxVersion: "1.2", Suites: []string{up}, AllowInsecure: true}
	if _, err := p.Check("suite"); err != nil {
		// DHE is OpenSSL's and not Go's: a cell "not offered". Any other name Go does
		// not know is taken for a typo.
		if !strings.HasPrefix(up, "DHE-") {
			return suite{}, err
		}
		s.GoMissing = err.Error()
	}
	return s, nil
}
