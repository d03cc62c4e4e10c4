package devicecert

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strconv"
	"time"
)

// OU marks a device's client certificate.
const OU = "iotsafe device"

// Template is the certificate of device name (incarnation gen) valid for lifetime.
func Template(name string, gen int64, lifetime time.Duration) (*x509.Certificate, error) {
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, SerialNumber: strconv.FormatInt(gen, 10), OrganizationalUnit: []string{OU}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, nil
}

// Identity reads the device a certificate (already verified against the hub's CA)
// names; ok is false for a certificate that is not a device's.
func Identity(c *x509.Certificate) (name string, gen int64, ok bool) {
	if len(c.Subject.OrganizationalUnit) != 1 || c.Subject.OrganizationalUnit[0] != OU || c.Subject.CommonName == "" {
		return "", 0, false
	}
	gen, err := strconv.ParseInt(c.Subject.SerialNumber, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return c.Subject.CommonName, gen, true
}
