package tlsbench

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/dtls/v3"
)

// DTLS 1.2 with pion/dtls (none of the DTLS libraries installed here implements DTLS 1.3). The modes map onto
// TLS 1.3's: full (ECDHE-ECDSA, AES-128-GCM), resume (session id, a server-side
// store), psk_ke (TLS_PSK_WITH_AES_128_GCM_SHA256: no ECDHE) and psk_dhe_ke
// (TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256, pion's only ECDHE-PSK suite). "pion+cid" adds
// RFC 9146 connection IDs (8 bytes from the server; the client only sends them).

// memStore is a SessionStore in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string]dtls.Session
}

func (s *memStore) Set(k []byte, v dtls.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]dtls.Session{}
	}
	s.m[string(k)] = v
	return nil
}

func (s *memStore) Get(k []byte) (dtls.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[string(k)], nil
}

func (s *memStore) Del(k []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, string(k))
	return nil
}

// countingPacketConn counts datagram bytes.
type countingPacketConn struct {
	net.PacketConn
	sent, recvd *atomic.Int64
}

func (c countingPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	c.recvd.Add(int64(n))
	return n, a, err
}

func (c countingPacketConn) WriteTo(p []byte, a net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, a)
	c.sent.Add(int64(n))
	return n, err
}

var errPSK = errors.New("unknown PSK identity")

// dtlsServer serves the lab's protocol over DTLS: handshake, close.
func dtlsServer(env netEnv, cert tls.Certificate, psk []byte, cid bool) (net.Listener, error) {
	opts := []dtls.ServerOption{dtls.WithCertificates(cert), dtls.WithSessionStore(&memStore{}),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
		dtls.WithPSK(func(hint []byte) ([]byte, error) {
			if string(hint) != "iotsafe" {
				return nil, errPSK
			}
			return psk, nil
		}),
		dtls.WithPSKIdentityHint([]byte("iotsafe")),
		dtls.WithCipherSuites(dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, dtls.TLS_PSK_WITH_AES_128_GCM_SHA256, dtls.TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256)}
	if cid {
		opts = append(opts, dtls.WithConnectionIDGenerator(dtls.RandomCIDGenerator(8)))
	}
	var ln net.Listener
	err := env.inServer(func() (err error) {
		ln, err = dtls.ListenWithOptions("udp", &net.UDPAddr{IP: env.serverIP()}, opts...)
		return err
	})
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
				c.SetDeadline(time.Now().Add(10 * time.Second))
				// DTLS 1.2 has no tickets after the handshake: the handshake is the
				// connection. The client closes first (a close_notify of ours could
				// overtake our Finished in the client's processing).
				if c.(*dtls.Conn).HandshakeContext(context.Background()) == nil {
					c.Read(make([]byte, 64))
				}
			}()
		}
	}()
	return ln, nil
}

// dtlsClient makes k connections (each from its own UDP port) one after the other.
func dtlsClient(ctx context.Context, env netEnv, addr net.Addr, k int, mode string, psk []byte, cid bool, trust *tls.Config) (Sample, error) {
	opts := []dtls.ClientOption{dtls.WithRootCAs(trust.RootCAs), dtls.WithServerName(trust.ServerName),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret)}
	switch mode {
	case "full":
		opts = append(opts, dtls.WithCipherSuites(dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256))
	case "resume":
		opts = append(opts, dtls.WithCipherSuites(dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), dtls.WithSessionStore(&memStore{}))
	case "psk_ke", "psk_dhe_ke":
		suite := dtls.TLS_PSK_WITH_AES_128_GCM_SHA256
		if mode == "psk_dhe_ke" {
			suite = dtls.TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256
		}
		opts = append(opts, dtls.WithCipherSuites(suite), dtls.WithPSKIdentityHint([]byte("iotsafe")),
			dtls.WithPSK(func([]byte) ([]byte, error) { return psk, nil }))
	}
	if cid {
		opts = append(opts, dtls.WithConnectionIDGenerator(dtls.OnlySendCIDGenerator()))
	}
	var sent, recvd atomic.Int64
	var prevID []byte
	s := Sample{K: k}
	start := time.Now()
	for range k {
		pc, err := env.listenUDP()
		if err != nil {
			return s, err
		}
		c, err := dtls.ClientWithOptions(countingPacketConn{pc, &sent, &recvd}, addr, opts...)
		if err != nil {
			pc.Close()
			return s, err
		}
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = c.HandshakeContext(hctx)
		cancel()
		if err != nil {
			c.Close()
			pc.Close()
			return s, err
		}
		if st, ok := c.ConnectionState(); ok {
			switch {
			case mode == "psk_ke" || mode == "psk_dhe_ke":
				s.Resumed++ // only PSK suites were offered
			case mode == "resume" && len(prevID) > 0 && string(st.SessionID) == string(prevID):
				s.Resumed++ // the server took the session id back
			}
			prevID = st.SessionID
		}
		c.Close()
		pc.Close()
	}
	s.Seconds = time.Since(start).Seconds()
	s.Sent, s.Received = sent.Load(), recvd.Load()
	return s, nil
}
