package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Target is one path under load: plain HTTP/1.1 to Addrs, or HTTPS when TLS is set
// (HTTP/2 when H2). Every request uses a new TCP (and TLS) connection, as in paper 000's
// table 3: no keep-alive, no multiplexing, no session resumption.
type Target struct {
	Name  string
	Addrs []string // requests go round-robin over these (one per forward)
	TLS   *tls.Config
	H2    bool
	Size  int // expected body size; 0 skips the check
	// Host and Header (extra "Name: value\r\n" lines) change the HTTP/1.1 request, for
	// the front door's name routing and credentials.
	Host, Header string
	// KeepAlive reuses one connection per worker (HTTP/1.1), the usual browser and API
	// client case, instead of one connection per request.
	KeepAlive bool
	// Dial, if set, opens the connections (from inside a network namespace).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	h2   *http.Transport
}

// NewH2Target is an HTTPS target spoken in HTTP/2, still a new connection per request.
func NewH2Target(name string, addrs []string, cfg *tls.Config, size int) Target {
	p := new(http.Protocols)
	p.SetHTTP2(true)
	tc := cfg.Clone()
	tc.NextProtos = []string{"h2"}
	return Target{Name: name, Addrs: addrs, TLS: cfg, H2: true, Size: size,
		h2: &http.Transport{TLSClientConfig: tc, Protocols: p, DisableCompression: true}}
}

// LoadResult counts one run.
type LoadResult struct {
	Requests int64
	Errors   int64
	Elapsed  time.Duration
	FirstErr string
}

// RPS is successful requests per second.
func (r LoadResult) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Load runs a closed loop of concurrency workers for warmup (not counted) then dur.
// mark, if set, is called with true when measuring starts and false when it ends.
func Load(ctx context.Context, t Target, concurrency int, warmup, dur time.Duration, mark func(measuring bool)) LoadResult {
	var ok, bad atomic.Int64
	var counting atomic.Bool
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var next atomic.Uint64
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kc keptConn
			defer kc.close()
			for ctx.Err() == nil {
				addr := t.Addrs[next.Add(1)%uint64(len(t.Addrs))]
				var err error
				if t.KeepAlive {
					err = kc.request(ctx, t, addr)
				} else {
					err = Request(ctx, t, addr)
				}
				if !counting.Load() {
					continue
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					bad.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
	}
	if mark != nil {
		mark(true)
	}
	counting.Store(true)
	start := time.Now()
	select {
	case <-time.After(dur):
	case <-ctx.Done():
	}
	counting.Store(false)
	if mark != nil {
		mark(false)
	}
	r := LoadResult{Requests: ok.Load(), Errors: bad.Load(), Elapsed: time.Since(start)}
	if e, _ := firstErr.Load().(string); e != "" {
		r.FirstErr = e
	}
	cancel()
	wg.Wait()
	return r
}

// request is the HTTP/1.1 request of t.
func (t Target) request(keepAlive bool) []byte {
	host := t.Host
	if host == "" {
		host = "lab"
	}
	conn := "Connection: close\r\n"
	if keepAlive {
		conn = ""
	}
	return []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\n" + t.Header + conn + "\r\n")
}

// Request makes one GET over a new connection and checks the answer.
func Request(ctx context.Context, t Target, addr string) error {
	if t.H2 {
		return h2Request(ctx, t, addr)
	}
	c, err := dial(ctx, t, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err = http1(c, bufio.NewReader(c), t.request(false), t.Size)
	return err
}

// dial opens a connection to addr, with TLS (no resumption) when t says so.
func dial(ctx context.Context, t Target, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	if t.Dial != nil {
		c, err = t.Dial(ctx, addr)
	} else {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil || t.TLS == nil {
		return c, err
	}
	cfg := t.TLS.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// keptConn is one worker's keep-alive connection, redialled when the server closes it.
type keptConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (k *keptConn) request(ctx context.Context, t Target, addr string) error {
	if k.c == nil {
		c, err := dial(ctx, t, addr)
		if err != nil {
			return err
		}
		k.c, k.br = c, bufio.NewReader(c)
	}
	k.c.SetDeadline(time.Now().Add(30 * time.Second))
	reusable, err := http1(k.c, k.br, t.request(true), t.Size)
	if err != nil || !reusable {
		k.close()
	}
	return err
}

func (k *keptConn) close() {
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

func h2Request(ctx context.Context, t Target, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cc, err := t.h2.NewClientConn(ctx, "https", addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || t.Size > 0 && n != int64(t.Size) {
		return fmt.Errorf("%s status %d, %d bytes", resp.Proto, resp.StatusCode, n)
	}
	return nil
}

// http1 sends req on c, reads the answer from br and checks it; reusable reports whether
// the connection may carry another request.
func http1(c net.Conn, br *bufio.Reader, req []byte, size int) (reusable bool, err error) {
	if _, err := c.Write(req); err != nil {
		return false, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != 200 || size > 0 && n != int64(size) {
		return false, fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return !resp.Close, nil
}

// Body returns the lab's response body of n bytes.
func Body(n int) []byte { return bytes.Repeat([]byte("x"), n) }
