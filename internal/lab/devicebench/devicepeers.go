package devicebench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// ServeFiles is the gateway's file server of the device bench: GET /N answers N bytes of
// random text (new content every time, as the paper's files), over HTTP/1.1 and h2c on
// listen and over HTTPS (TLS 1.2/1.3, h2 and HTTP/1.1) on tlsListen.
func ServeFiles(ctx context.Context, listen, tlsListen, certFile, keyFile string, out io.Writer) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil || n < 0 || n > 64<<20 {
			http.Error(w, "GET /BYTES", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(randomText(n))
	})
	plainProtos := new(http.Protocols)
	plainProtos.SetHTTP1(true)
	plainProtos.SetUnencryptedHTTP2(true)
	plain := &http.Server{Handler: h, Protocols: plainProtos, ReadHeaderTimeout: 30 * time.Second}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	secure := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	pl, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	tl, err := net.Listen("tcp", tlsListen)
	if err != nil {
		pl.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		plain.Close()
		secure.Close()
	}()
	errs := make(chan error, 2)
	go func() { errs <- plain.Serve(pl) }()
	go func() { errs <- secure.ServeTLS(tl, "", "") }()
	fmt.Fprintf(out, "listening %s %s\n", pl.Addr(), tl.Addr())
	err = <-errs
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

const textAlphabet = "abcdefghijklmnopqrstuvwxyz      ABCDEFGHIJ0123456789.,\n"

func randomText(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for i := range b {
		b[i] = textAlphabet[r.IntN(len(textAlphabet))]
	}
	return b
}

// DeviceClient is the device's HTTP client of the device bench. Each input line
// "BASE PROTO TLS COUNT SIZE" (PROTO h1: a new connection per request, as ab does; h2: one
// connection for the series, as h2load does; TLS none, 12 or 13) makes COUNT sequential
// GETs of BASE/SIZE and prints "ok NANOSECONDS" or "err MESSAGE".
func DeviceClient(ctx context.Context, caFile string, in io.Reader, out io.Writer) error {
	pool := x509.NewCertPool()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool.AppendCertsFromPEM(pem)
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var base, proto, tlsMode string
		var count, size int
		if _, err := fmt.Sscanf(sc.Text(), "%s %s %s %d %d", &base, &proto, &tlsMode, &count, &size); err != nil {
			fmt.Fprintf(out, "err bad command %q\n", sc.Text())
			continue
		}
		d, err := deviceSeries(ctx, pool, base, proto, tlsMode, count, size)
		if err != nil {
			fmt.Fprintf(out, "err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Fprintf(out, "ok %d\n", d.Nanoseconds())
	}
	return sc.Err()
}

func deviceSeries(ctx context.Context, pool *x509.CertPool, base, proto, tlsMode string, count, size int) (time.Duration, error) {
	tc := &tls.Config{RootCAs: pool, ServerName: "lab"}
	switch tlsMode {
	case "12":
		tc.MinVersion, tc.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		tc.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384} // the paper's suite
	case "13":
		tc.MinVersion = tls.VersionTLS13
	}
	protos := new(http.Protocols)
	tr := &http.Transport{TLSClientConfig: tc, DisableCompression: true, Protocols: protos}
	switch {
	case proto == "h1":
		protos.SetHTTP1(true)
		tr.DisableKeepAlives = true
	case strings.HasPrefix(base, "https:"):
		protos.SetHTTP2(true)
	default:
		protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Minute}
	start := time.Now()
	for range count {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/%d", base, size), nil)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n != int64(size) {
			return 0, fmt.Errorf("GET %s/%d: %s, %d bytes, %v", base, size, resp.Status, n, err)
		}
	}
	return time.Since(start), nil
}
