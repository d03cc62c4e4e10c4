package lab

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// ServeApp is the device application of the benchmarks: GET / answers size bytes. It
// prints "listening ADDR" once it accepts connections.
func ServeApp(ctx context.Context, listen string, size int, out io.Writer) error {
	return serve(ctx, listen, size, nil, out)
}

// ServeHTTPS is the HTTPS baseline: the same answer behind TLS (HTTP/1.1 and HTTP/2).
func ServeHTTPS(ctx context.Context, listen string, size int, certFile, keyFile string, out io.Writer) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	return serve(ctx, listen, size, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}, out)
}

func serve(ctx context.Context, listen string, size int, tc *tls.Config, out io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	body := Body(size)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          nil,
	}
	srv.SetKeepAlivesEnabled(true)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	if tc != nil {
		srv.TLSConfig = tc
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

// WriteCert writes a self-signed ECDSA P-256 certificate (the paper's HTTPS baseline
// used ECDSA) for "lab" and 127.0.0.1 into dir and returns a client configuration that
// trusts it.
func WriteCert(dir string) (certFile, keyFile string, client *tls.Config, err error) {
	return WriteServerCert(dir, "lab", false)
}

// WriteServerCert writes a self-signed server certificate (name.crt, name.key) for the
// name "lab" and the addresses a lab peer listens on (127.0.0.1, and LinkGWAddr on an
// emulated link), with an ECDSA P-256 key or, with rsaKey, an RSA 2048 one (for the
// suites that authenticate the server with RSA). The client configuration trusts it.
func WriteServerCert(dir, name string, rsaKey bool) (certFile, keyFile string, client *tls.Config, err error) {
	var signer crypto.Signer
	if rsaKey {
		signer, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		signer, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return "", "", nil, err
	}
	usage := x509.KeyUsageDigitalSignature
	if rsaKey {
		usage |= x509.KeyUsageKeyEncipherment // RSA key exchange (AES128-SHA and kin)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "iotsafe lab"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(60 * 24 * time.Hour), // past the scan's 30-day warning
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(LinkGWAddr)},
		DNSNames:     []string{"lab"},
		KeyUsage:     usage,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
	if err != nil {
		return "", "", nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(signer)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, name+"-cert.pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", nil, err
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return certFile, keyFile, &tls.Config{RootCAs: pool, ServerName: "lab", MinVersion: tls.VersionTLS12}, nil
}
