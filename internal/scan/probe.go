package scan

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"time"

	"github.com/iotsafe/iotsafe/internal/mqttclient"
)

// Robustness is paper 003's fuzz probe in small: garbage, a truncated ClientHello, a
// record longer than TLS allows and a ClientHello claiming more bytes than it has, each
// on its own connection; then a normal ClientHello must still be answered.
func Robustness(ctx context.Context, r *Report, addr string, o Options) {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	s := &scanner{o: o, addr: addr, r: r}
	good, _ := hello{version: VersionTLS12, tls13: true, suites: append(ids(suites13), ids(suites12)...), sni: o.Name}.marshal()
	garbage := make([]byte, 4096)
	rand.Read(garbage)
	oversized := append([]byte{22, 3, 1, 0xff, 0xff}, make([]byte, 1024)...)
	lying := append([]byte{}, good...)
	lying[3], lying[4] = 0x3f, 0xff // the record says 16 KiB, a few hundred bytes follow
	cases := []struct {
		name string
		data []byte
	}{
		{"random bytes", garbage},
		{"a truncated ClientHello", good[:len(good)/2]},
		{"a record longer than TLS allows", oversized},
		{"a ClientHello shorter than its record says", lying},
		{"a plain HTTP request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
	}
	for _, c := range cases {
		conn, err := o.dial(ctx, addr)
		if err != nil {
			r.add("robustness", Insecure, "after %s: no longer accepts connections: %v", c.name, err)
			return
		}
		conn.SetDeadline(time.Now().Add(o.Timeout))
		conn.Write(c.data)
		// Half-close: the server sees the end of what it got (a truncated message).
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		io.Copy(io.Discard, io.LimitReader(conn, 1<<16))
		conn.Close()
	}
	if sh, err := s.probe(ctx, hello{version: VersionTLS12, tls13: true, suites: append(ids(suites13), ids(suites12)...)}); err != nil || sh == nil {
		r.add("robustness", Insecure, "after malformed input a ClientHello is no longer answered: %v", err)
		return
	}
	r.add("robustness", Good, "still serves after %d kinds of malformed input", len(cases))
}

// CheckMQTTAnonymous connects over TLS and sends a CONNECT without credentials.
func CheckMQTTAnonymous(ctx context.Context, r *Report, addr string, o Options) {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c, err := o.dial(ctx, addr)
	if err != nil {
		r.add("mqtt", Info, "no connection: %v", err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(o.Timeout))
	tc := tls.Client(c, &tls.Config{ServerName: o.Name, InsecureSkipVerify: true, NextProtos: []string{"mqtt"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		r.add("mqtt", Info, "no TLS handshake: %v", err)
		return
	}
	_, err = mqttclient.New(tc, 4, 1<<16).Connect(mqttclient.Options{ClientID: "iotsafe-scan", Clean: true}, o.Timeout)
	var refused *mqttclient.RefusedError
	switch {
	case err == nil:
		r.add("mqtt", Insecure, "an anonymous CONNECT (no user name, no certificate) is accepted")
	case errors.As(err, &refused):
		r.add("mqtt", Good, "an anonymous CONNECT is refused: %s", refused.Reason)
	default:
		r.add("mqtt", Info, "anonymous CONNECT: %v", err)
	}
}
