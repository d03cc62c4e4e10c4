package tls13conn

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzRecords seals what a peer could put inside records (any content type, padding,
// alerts, handshake messages split anyhow) and reads them: no panic, and the reading
// ends with an error once the input does. Each record of the input is a length byte and
// that many bytes of inner plaintext. Seeds in testdata/fuzz/FuzzRecords.
func FuzzRecords(f *testing.F) {
	f.Add([]byte{6, 'h', 'e', 'l', 'l', 'o', typeApplication})
	f.Add([]byte{3, 1, 0, typeAlert})
	f.Add([]byte{6, msgKeyUpdate, 0, 0, 1, 1, typeHandshake, 3, 'o', 'k', typeApplication})
	f.Add([]byte{3, msgKeyUpdate, 0, typeHandshake, 3, 0, 1, typeHandshake})
	f.Add([]byte{4, 'x', typeApplication, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		s, c := connPair(t, tls.TLS_AES_128_GCM_SHA256)
		go func() {
			c.wmu.Lock()
			defer c.wmu.Unlock()
			for len(in) > 0 {
				n := min(int(in[0]), len(in)-1)
				inner := in[1 : 1+n]
				in = in[1+n:]
				// The fuzzer's bytes are the whole inner plaintext: their last byte is
				// the content type writeRecord puts after the data.
				if len(inner) == 0 {
					continue
				}
				if c.writeRecord(inner[len(inner)-1], inner[:len(inner)-1]) != nil {
					return
				}
			}
			c.raw.Close()
		}()
		buf := make([]byte, 64)
		for range 10_000 {
			if _, err := s.Read(buf); err != nil {
				return // io.EOF, a refusal, or the cut stream
			}
		}
		t.Fatal("reading never ended")
	})
}

// FuzzHandshakeInput gives the handshake's record-aligned reader anything a client
// could send first: crypto/tls refuses it, nothing panics, no secret is kept. Seeds in
// testdata/fuzz/FuzzHandshakeInput.
func FuzzHandshakeInput(f *testing.F) {
	f.Add([]byte{typeHandshake, 3, 1, 0, 5, 1, 0, 0, 1, 3})
	f.Add([]byte{typeHandshake, 3, 1, 0, 0, typeHandshake, 3, 1})
	f.Add([]byte{typeApplication, 3, 3, 0x40, 0, 1})
	p := newPKI(f)
	srv := NewServer(serverConfig(p))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		defer a.Close()
		// The client side writes the input and reads whatever alert comes back: a pipe
		// has no buffer, so an unread alert would hold the server.
		go io.Copy(io.Discard, b)
		go func() {
			b.Write(in)
			b.Close()
		}()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		if c, err := srv.Handshake(a); err == nil {
			c.Close()
			t.Fatal("a handshake of fuzzed bytes succeeded")
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if len(srv.secrets) != 0 {
			t.Fatal("a failed handshake left its entry")
		}
	})
}
