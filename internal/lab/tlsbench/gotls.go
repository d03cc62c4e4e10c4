package tlsbench

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// countingConn counts the bytes on a connection (TLS records included).
type countingConn struct {
	net.Conn
	sent, recvd *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.recvd.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

// goServer serves the lab's protocol with Go's TLS of version: handshake, one byte,
// close.
func goServer(env netEnv, cert tls.Certificate, version uint16) (net.Listener, error) {
	return goServe(env, cert, version, func(c net.Conn, tc *tls.Conn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() == nil {
			tc.Write([]byte("k"))
			tc.Close()
		}
	})
}

// goEchoServer serves fig. 6's payload runs with Go's TLS: after the handshake it sends
// back every byte it reads.
func goEchoServer(cert tls.Certificate) (net.Listener, error) {
	return goServe(netEnv{}, cert, tls.VersionTLS13, func(_ net.Conn, tc *tls.Conn) { io.Copy(tc, tc) })
}

// goServe accepts TLS connections of version only in env and hands each to serve, then
// closes it. Its config is the hub's listeners' (tlspolicy: groups, session tickets
// sealed with the hub's own keys) restricted to version; TLS 1.2 takes the hub's
// default TLS 1.2 suite (ECDHE-ECDSA with AES-128-GCM): the hub's listeners accept TLS
// 1.2 by default. Every group Go has is listed, P-521 too (off in the hub's default):
// the lab measures what each costs, the figures the default was chosen by.
func goServe(env netEnv, cert tls.Certificate, version uint16, serve func(net.Conn, *tls.Conn)) (net.Listener, error) {
	v := "1.3"
	if version == tls.VersionTLS12 {
		v = "1.2"
	}
	cfg, err := tlspolicy.Policy{MinVersion: v, MaxVersion: v, Suites: []string{"ECDHE-ECDSA-AES128-GCM-SHA256"},
		Groups: []string{"X25519MLKEM768", "X25519", "P-256", "P-384", "P-521"}}.Config()
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{cert}
	ln, err := env.listenTCP()
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c, tls.Server(c, cfg))
			}()
		}
	}()
	return ln, nil
}

// goClient makes k connections one after the other, verifying the server's certificate
// with trust as a real client would; resume keeps a session cache.
// A window > 0 makes as many connections as fit in it (k is then a cap), and the suite
// the connections negotiated is recorded (Go chooses its TLS 1.3 suite itself).
func goClient(ctx context.Context, env netEnv, addr string, version uint16, k int, resume bool, group tls.CurveID, trust *tls.Config, window time.Duration) (Sample, error) {
	cfg := trust.Clone()
	cfg.MinVersion, cfg.MaxVersion, cfg.CurvePreferences = version, version, []tls.CurveID{group}
	if resume {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	var sent, recvd atomic.Int64
	s := Sample{K: k}
	if window > 0 {
		s.K = 0
	}
	start := time.Now()
	for i := 0; i < k && (window <= 0 || time.Since(start) < window); i++ {
		c, err := env.dialTCP(ctx, addr)
		if err != nil {
			return s, err
		}
		tc := tls.Client(countingConn{c, &sent, &recvd}, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return s, err
		}
		// Takes the tickets too (TLS 1.3). The byte may come with the server's
		// close_notify in one read (TLS 1.2): io.EOF with it is fine.
		if n, err := tc.Read(make([]byte, 1)); n != 1 {
			c.Close()
			return s, err
		}
		st := tc.ConnectionState()
		if st.DidResume {
			s.Resumed++
		}
		s.Suite = tls.CipherSuiteName(st.CipherSuite)
		s.K = i + 1
		c.Close()
	}
	s.Seconds = time.Since(start).Seconds()
	s.Sent, s.Received = sent.Load(), recvd.Load()
	return s, nil
}

// goPayload sends size-byte messages over one TLS 1.3 connection and reads each back,
// one after the other, for window: the messages made and the bytes on the client's
// socket each way (TLS records included).
func goPayload(ctx context.Context, addr string, size int, trust *tls.Config, window time.Duration) (Sample, error) {
	cfg := trust.Clone()
	cfg.MinVersion = tls.VersionTLS13
	var sent, recvd atomic.Int64
	c, err := netEnv{}.dialTCP(ctx, addr)
	if err != nil {
		return Sample{}, err
	}
	defer c.Close()
	tc := tls.Client(countingConn{c, &sent, &recvd}, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return Sample{}, err
	}
	s0, r0 := sent.Load(), recvd.Load()
	msg, back := make([]byte, size), make([]byte, size)
	s := Sample{}
	start := time.Now()
	for time.Since(start) < window {
		if _, err := tc.Write(msg); err != nil {
			return s, err
		}
		if _, err := io.ReadFull(tc, back); err != nil {
			return s, err
		}
		s.K++
	}
	s.Seconds = time.Since(start).Seconds()
	s.Sent, s.Received = sent.Load()-s0, recvd.Load()-r0
	return s, nil
}
