package pki

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// fileCert serves an operator's certificate and key, re-reading them when either file
// changes (checked at most every two seconds); a broken pair keeps the previous one.
type fileCert struct {
	certPath, keyPath string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// FileCertificate serves an operator's certificate and key files, re-read when they
// change, for a TLS listener's GetCertificate.
func FileCertificate(certPath, keyPath string, log *slog.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	fc, err := newFileCert(certPath, keyPath, log)
	if err != nil {
		return nil, err
	}
	return fc.GetCertificate, nil
}

func newFileCert(certPath, keyPath string, log *slog.Logger) (*fileCert, error) {
	f := &fileCert{certPath: certPath, keyPath: keyPath, log: log}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *fileCert) fileStamp() string {
	var b strings.Builder
	for _, p := range []string{f.certPath, f.keyPath} {
		if fi, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d.%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return b.String()
}

func (f *fileCert) load() error {
	stamp := f.fileStamp()
	pair, err := tls.LoadX509KeyPair(f.certPath, f.keyPath)
	if err != nil {
		return fmt.Errorf("pki: certificate %s / key %s: %w", f.certPath, f.keyPath, err)
	}
	f.cert, f.stamp = &pair, stamp
	return nil
}

func (f *fileCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) > 2*time.Second {
		f.checked = time.Now()
		if s := f.fileStamp(); s != f.stamp {
			if err := f.load(); err != nil {
				f.log.Error("new certificate files unusable; serving the previous certificate", "err", err)
				f.stamp = s // do not retry on every handshake; the next change retries
			} else {
				f.log.Info("certificate reloaded", "cert", f.certPath, "not_after", f.cert.Leaf.NotAfter)
			}
		}
	}
	return f.cert, nil
}
