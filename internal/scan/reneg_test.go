package scan

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// openSSLServer runs openssl s_server (HTTP answers, an RSA certificate) with extra
// options on a free port until the test ends.
func openSSLServer(t *testing.T, extra ...string) string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not installed: run scripts/setup.sh")
	}
	cert, key, _, err := lab.WriteServerCert(t.TempDir(), "lab", true)
	if err != nil {
		t.Fatal(err)
	}
	port, err := lab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := lab.StartProc("s_server", nil, append([]string{"openssl", "s_server", "-accept", addr, "-cert", cert, "-key", key, "-www"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.ReadLine(ctx, "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	return addr
}

// The check carries a real TLS 1.2 session to OpenSSL and Go and asks to renegotiate:
// OpenSSL 3.0 refuses by default and accepts with -client_renegotiation; Go's server
// never renegotiates. A TLS 1.3-only server is not asked.
func TestClientRenegotiation(t *testing.T) {
	ctx := context.Background()
	check := func(addr string) []string {
		s := &scanner{o: Options{Name: "lab", Timeout: 5 * time.Second}, addr: addr, r: &Report{}}
		s.clientRenegotiation(ctx)
		var out []string
		for _, f := range s.r.Findings {
			out = append(out, f.Severity.String()+": "+f.Detail)
		}
		return out
	}
	if got := check(openSSLServer(t)); !has(got, "good: client-initiated renegotiation refused") {
		t.Errorf("OpenSSL by default: %v", got)
	}
	if got := check(openSSLServer(t, "-client_renegotiation")); !has(got, "weak: client-initiated renegotiation accepted") {
		t.Errorf("OpenSSL with -client_renegotiation: %v", got)
	}
	goSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	goSrv.TLS = &tls.Config{MaxVersion: tls.VersionTLS12}
	goSrv.StartTLS()
	defer goSrv.Close()
	if got := check(goSrv.Listener.Addr().String()); !has(got, "good: client-initiated renegotiation refused") {
		t.Errorf("Go's server: %v", got)
	}
	// A server whose TLS 1.2 has no ECDHE with AES-128-GCM: said, not guessed.
	if got := check(openSSLServer(t, "-cipher", "ECDHE-RSA-AES256-SHA", "-tls1_2")); !has(got, "info: client-initiated renegotiation not checked") {
		t.Errorf("no suite the check carries: %v", got)
	}
}

// replayConn plays a server's bytes to the check and swallows what it sends: how a
// fuzz input reaches handshake12 and renegotiate.
type replayConn struct {
	net.Conn // nil: only Read and Write are used
	r        *bytes.Reader
}

func (c replayConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c replayConn) Write(p []byte) (int, error) { return len(p), nil }

// FuzzHandshake12: whatever a server sends, the check neither panics nor loops.
func FuzzHandshake12(f *testing.F) {
	sh := []byte{2, 0, 0, 0, 3, 3}
	sh = append(sh, make([]byte, 32)...)
	sh = append(sh, 0, 0xc0, 0x2f, 0, 0, 0)
	sh[3] = byte(len(sh) - 4)
	ske := []byte{12, 0, 0, 36, 3, 0, 0x1d, 32}
	ske = append(ske, make([]byte, 32)...)
	done := []byte{14, 0, 0, 0}
	flight := append(append(append([]byte{}, sh...), ske...), done...)
	f.Add(append([]byte{22, 3, 3, byte(len(flight) >> 8), byte(len(flight))}, flight...))
	f.Add([]byte{21, 3, 3, 0, 2, 2, 40})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := handshake12(replayConn{r: bytes.NewReader(b)}, "lab")
		if err == nil {
			s.renegotiate("lab")
		}
	})
}
