package zmux

import (
	"bufio"
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"net"
	"testing"
)

// FuzzReadFrame feeds the frame decoder arbitrary (already decompressed) bytes: it must
// never panic, never return a frame outside the limits, and fail only with a protocol
// error or a truncation.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendOpen(nil, 1, Target{Kind: Direct, Host: "broker", Port: 1883, OriginHost: "127.0.0.1", OriginPort: 4000}))
	f.Add(appendData(nil, 3, []byte("GET / HTTP/1.1\r\n\r\n")))
	f.Add(appendWindow(nil, 2, Window/2))
	f.Add(appendHeader(nil, frameEOF, 5))
	f.Add(appendReset(nil, 7, "refused"))
	f.Add(appendSettings(nil, DefaultWindow2))
	f.Add([]byte{2, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		buf := make([]byte, MaxData)
		for {
			fr, err := readFrame(r, buf)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if (fr.id == 0) != (fr.typ == frameSettings) || len(fr.data) > MaxData || len(fr.target.Host) > maxHost || len(fr.reason) > maxReason || fr.incr > MaxWindow ||
				fr.typ == frameSettings && fr.incr < Window {
				t.Fatalf("frame outside the limits: %+v", fr)
			}
		}
	})
}

// FuzzSession feeds a hub-side session arbitrary frames (compressed by the harness, as a
// device would send them): the session must not panic or hang; it serves or fails.
func FuzzSession(f *testing.F) {
	f.Add(appendData(appendOpen(nil, 1, Target{Kind: Direct, Host: "api"}), 1, []byte("x")))
	f.Add(appendReset(appendHeader(appendOpen(nil, 1, Target{Kind: Direct}), frameEOF, 1), 1, ""))
	f.Add(appendWindow(appendOpen(nil, 3, Target{Kind: Forwarded}), 3, 100))
	f.Add(appendData(appendOpen(appendSettings(nil, DefaultWindow2), 1, Target{Kind: Direct, Host: "api"}), 1, []byte("x")))
	f.Add(appendSettings(appendSettings(nil, Window), Window))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		// Version 2: the settings frame is allowed (once); version 1 takes the same input
		// in FuzzSession's seeds without settings.
		hub := New(b, Options{Compress: true, Version2: len(in) > 0 && in[0] == byte(frameSettings)})
		defer hub.Close()
		go io.Copy(io.Discard, a)
		go func() {
			for {
				st, err := hub.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(io.Discard, st); st.Write([]byte("ok")); st.Close() }()
			}
		}()
		zw, _ := flate.NewWriter(a, Level)
		zw.Write(in)
		zw.Close()
		a.Close()
		<-hub.Done()
	})
}
