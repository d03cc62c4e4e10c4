package zmux

import (
	"bufio"
	"bytes"
	"compress/flate"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// pair returns a device-side and a hub-side session over a loopback TCP connection (the
// tests of the SSH layer run them over real SSH channels).
func pair(t *testing.T) (device, hub *Session) { return pairMode(t, Options{Compress: true}) }

func pairMode(t *testing.T, o Options) (device, hub *Session) {
	t.Helper()
	a, b := tcpPair(t)
	hub = New(b, o)
	o.Device = true
	device = New(a, o)
	t.Cleanup(func() { device.Close(); hub.Close() })
	return device, hub
}

// bothModes runs f with and without compression, with a flush delay and in version 2:
// multiplexing must not depend on any of them.
func bothModes(t *testing.T, f func(t *testing.T, dev, hub *Session)) {
	for _, o := range []Options{{Compress: true}, {}, {Compress: true, FlushDelay: time.Millisecond}, {Version2: true}, {Compress: true, Version2: true}} {
		t.Run(fmt.Sprintf("compress=%v,delay=%v,v2=%v", o.Compress, o.FlushDelay, o.Version2), func(t *testing.T) {
			dev, hub := pairMode(t, o)
			f(t, dev, hub)
		})
	}
}

func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// echo serves every stream the session accepts by copying it back, half-closing after.
func echo(s *Session) {
	for {
		st, err := s.Accept()
		if err != nil {
			return
		}
		go func() {
			io.Copy(st, st)
			st.CloseWrite()
		}()
	}
}

func roundTrip(t *testing.T, s *Session, tg Target, payload []byte) {
	t.Helper()
	st, err := s.Open(tg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	werr := make(chan error, 1)
	go func() {
		_, err := st.Write(payload)
		if err == nil {
			err = st.CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(st)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo of %d bytes came back as %d bytes, different", len(payload), len(got))
	}
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestStreamsBothWaysCarryDataIntact(t *testing.T) {
	bothModes(t, func(t *testing.T, dev, hub *Session) {
		go echo(hub)
		go echo(dev)
		var wg sync.WaitGroup
		// Sizes around the frame size and well over the window, so flow control works.
		for i, n := range []int{1, MaxData - 1, MaxData + 1, Window, 3*Window + 7, 1 << 20} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				roundTrip(t, dev, Target{Kind: Direct, Host: "broker", Port: 1883}, random(n))
			}()
			go func() {
				defer wg.Done()
				roundTrip(t, hub, Target{Kind: Forwarded, Host: "http", Port: 80, OriginHost: "127.0.0.1", OriginPort: uint32(40000 + i)}, random(n))
			}()
		}
		wg.Wait()
	})
}

func TestTargetReachesAcceptor(t *testing.T) {
	dev, hub := pair(t)
	want := Target{Kind: Direct, Host: "broker", Port: 1883, OriginHost: "127.0.0.1", OriginPort: 5555}
	if _, err := dev.Open(want); err != nil {
		t.Fatal(err)
	}
	st, err := hub.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if st.Target() != want {
		t.Fatalf("target %+v, want %+v", st.Target(), want)
	}
}

// A burst of opens larger than the accept backlog, all sent before the other side
// accepts any, is served in full: the reader waits for Accept instead of refusing.
func TestBurstBeyondBacklogIsServed(t *testing.T) {
	bothModes(t, func(t *testing.T, dev, hub *Session) {
		const n = 3 * acceptBacklog
		streams := make([]*Stream, n)
		for i := range streams {
			st, err := dev.Open(Target{Kind: Direct, Host: "broker", Port: 1883})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fmt.Fprintf(st, "ping %d\n", i); err != nil {
				t.Fatal(err)
			}
			st.CloseWrite()
			streams[i] = st
		}
		go func() {
			for {
				st, err := hub.Accept()
				if err != nil {
					return
				}
				go func() {
					defer st.Close()
					line, err := bufio.NewReader(st).ReadString('\n')
					if err == nil {
						io.WriteString(st, "re "+line)
						st.CloseWrite()
					}
				}()
			}
		}()
		for i, st := range streams {
			b, err := io.ReadAll(st)
			if want := fmt.Sprintf("re ping %d\n", i); err != nil || string(b) != want {
				t.Fatalf("stream %d: %q %v, want %q", i, b, err, want)
			}
		}
	})
}

// An acceptor that reads each stream to its end before taking the next is served while
// the backlog is full: streams are woken for the data already decoded before the read
// loop waits for Accept.
func TestSerialAcceptorBeyondBacklog(t *testing.T) {
	bothModes(t, func(t *testing.T, dev, hub *Session) {
		const n = 3 * acceptBacklog
		for i := range n {
			st, err := dev.Open(Target{Kind: Direct, Host: "broker", Port: 1883})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(st, "ping %d\n", i)
			st.CloseWrite()
		}
		for i := range n {
			st, err := hub.Accept()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(st)
			if want := fmt.Sprintf("ping %d\n", i); err != nil || string(b) != want {
				t.Fatalf("stream %d: %q %v, want %q", i, b, err, want)
			}
			st.Close()
		}
	})
}

func TestHalfCloseThenReply(t *testing.T) {
	bothModes(t, func(t *testing.T, dev, hub *Session) {
		go func() {
			st, err := hub.Accept()
			if err != nil {
				return
			}
			req, _ := io.ReadAll(st) // returns only at the device's CloseWrite
			st.Write([]byte("got " + string(req)))
			st.CloseWrite()
		}()
		st, _ := dev.Open(Target{Kind: Direct, Host: "api"})
		st.Write([]byte("GET /"))
		st.CloseWrite()
		got, err := io.ReadAll(st)
		if err != nil || string(got) != "got GET /" {
			t.Fatalf("reply %q, %v", got, err)
		}
	})
}

func TestRefusedStreamShowsReason(t *testing.T) {
	bothModes(t, func(t *testing.T, dev, hub *Session) {
		go func() {
			st, err := hub.Accept()
			if err == nil {
				st.Reset(`direct forward to "db": not a direct alias of profile "sensor"`)
			}
		}()
		st, _ := dev.Open(Target{Kind: Direct, Host: "db"})
		st.Write([]byte("sent before the refusal arrives: discarded"))
		_, err := io.ReadAll(st)
		var re *ResetError
		if !errors.As(err, &re) || !strings.Contains(re.Reason, "not a direct alias") {
			t.Fatalf("read error %v, want the refusal's reason", err)
		}
		// The session stays usable for other streams.
		go echo(hub)
		roundTrip(t, dev, Target{Kind: Direct, Host: "broker"}, []byte("still works"))
	})
}

func TestStalledStreamDoesNotBlockOthers(t *testing.T) {
	bothModes(t, func(t *testing.T, dev, hub *Session) {
		stalled := make(chan *Stream, 1)
		go func() {
			st, _ := hub.Accept() // never read
			stalled <- st
			echo(hub)
		}()
		a, _ := dev.Open(Target{Kind: Direct, Host: "slow"})
		// Fill the stalled stream's window entirely; the next write would wait.
		win := Window
		if dev.v2 {
			win = int(hub.recvWindow) // announced by the hub
		}
		if _, err := a.Write(random(win)); err != nil {
			t.Fatal(err)
		}
		<-stalled
		blocked := make(chan error, 1)
		go func() { _, err := a.Write([]byte("x")); blocked <- err }()
		// Another stream still flows both ways.
		roundTrip(t, dev, Target{Kind: Direct, Host: "fast"}, random(2*Window))
		// Closing the stalled stream releases its writer with an error.
		a.Close()
		if err := <-blocked; err == nil {
			t.Fatal("write on a closed stream succeeded")
		}
	})
}

// Headers repeated across connections must compress against each other: the context is
// the session's, not the stream's.
func TestCompressionSpansStreams(t *testing.T) {
	dev, hub := pair(t)
	go echo(hub)
	header := []byte("GET /sensors/temperature HTTP/1.1\r\nHost: dev42.devices.example.com\r\nUser-Agent: iotsafe-demo/1.0\r\nAccept: application/json\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n")
	for i := range 50 {
		roundTrip(t, dev, Target{Kind: Direct, Host: "api", OriginPort: uint32(i)}, header)
	}
	st := dev.Stats()
	if st.RawOut < int64(50*len(header)) {
		t.Fatalf("raw bytes out %d, want at least %d", st.RawOut, 50*len(header))
	}
	// One stream alone could not compress below about half; across streams it must.
	if st.WireOut*5 > st.RawOut {
		t.Fatalf("%d raw bytes went out as %d: repeated headers across streams did not compress", st.RawOut, st.WireOut)
	}
}

func TestWithoutCompressionBytesGoAsTheyAre(t *testing.T) {
	dev, hub := pairMode(t, Options{})
	go echo(hub)
	roundTrip(t, dev, Target{Kind: Direct, Host: "api"}, bytes.Repeat([]byte("same "), 1000))
	if st := dev.Stats(); st.WireOut != st.RawOut || st.RawOut < 5000 {
		t.Fatalf("uncompressed session sent %d raw bytes as %d", st.RawOut, st.WireOut)
	}
}

func TestPeerClosingChannelFailsStreams(t *testing.T) {
	a, b := tcpPair(t)
	dev, hub := New(a, Options{Device: true, Compress: true}), New(b, Options{Compress: true})
	defer dev.Close()
	go echo(hub)
	roundTrip(t, dev, Target{Kind: Direct, Host: "api"}, []byte("some traffic first"))
	st, _ := dev.Open(Target{Kind: Direct, Host: "api"})
	b.Close() // the hub side's connection drops under its session
	if _, err := io.ReadAll(st); err == nil {
		t.Fatal("read on a stream of a dead session returned no error")
	}
	<-dev.Done()
	if _, err := dev.Open(Target{Kind: Direct, Host: "api"}); err == nil {
		t.Fatal("open on a dead session succeeded")
	}
	// A peer that goes away is not a peer breaking the protocol, even though the deflate
	// stream ends without its final block.
	if err := dev.Err(); err != io.EOF {
		t.Fatalf("session ended with %v, want io.EOF", err)
	}
}

// rawPeer lets a test speak the wire format by hand to a session.
type rawPeer struct {
	conn net.Conn
	zw   *flate.Writer
}

func newRawPeerWith(t *testing.T, o Options) (*rawPeer, *Session) {
	a, b := tcpPair(t)
	hub := New(b, o)
	t.Cleanup(func() { hub.Close(); a.Close() })
	zw, _ := flate.NewWriter(a, Level)
	go io.Copy(io.Discard, a)
	return &rawPeer{conn: a, zw: zw}, hub
}

func (p *rawPeer) send(b []byte) {
	p.zw.Write(b)
	p.zw.Flush()
}

func TestProtocolViolationsEndTheSession(t *testing.T) {
	cases := map[string]func() []byte{
		"data over the window": func() []byte {
			b := appendOpen(nil, 1, Target{Kind: Direct, Host: "api"})
			for range Window/MaxData + 1 {
				b = appendData(b, 1, make([]byte, MaxData))
			}
			return b
		},
		"frame for a stream never opened": func() []byte { return appendData(nil, 9, []byte("x")) },
		"open with the hub's parity":      func() []byte { return appendOpen(nil, 2, Target{Kind: Direct}) },
		"reused stream id": func() []byte {
			return appendOpen(appendOpen(nil, 3, Target{Kind: Direct}), 3, Target{Kind: Direct})
		},
		"unknown frame type": func() []byte { return []byte{99, 1} },
		"window overflow": func() []byte {
			return appendWindow(appendOpen(nil, 1, Target{Kind: Direct}), 1, Window)
		},
		"settings in version 1": func() []byte { return appendSettings(nil, DefaultWindow2) },
	}
	expectProtocolErrors(t, Options{Compress: true}, cases)
}

// expectProtocolErrors sends each case's frames to a hub session with options o and
// expects the session to end with a protocol error.
func expectProtocolErrors(t *testing.T, o Options, cases map[string]func() []byte) {
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) {
			peer, hub := newRawPeerWith(t, o)
			go func() {
				for {
					if _, err := hub.Accept(); err != nil {
						return
					}
				}
			}()
			peer.send(frames())
			<-hub.Done()
			if err := hub.Err(); !errors.Is(err, ErrProtocol) {
				t.Fatalf("session ended with %v, want a protocol error", err)
			}
		})
	}
}

// Version 2: each side's announced window replaces Window, for streams opened before
// and after the settings frame arrives; a reader that stalls still bounds what it holds.
func TestVersion2AnnouncedWindow(t *testing.T) {
	dev, hub := pairMode(t, Options{Version2: true})
	stalled := make(chan *Stream, 1)
	go func() {
		st, _ := hub.Accept() // never read
		stalled <- st
		echo(hub)
	}()
	a, _ := dev.Open(Target{Kind: Direct, Host: "slow"})
	// Four times version 1's window fits without the reader reading: the write returns.
	if _, err := a.Write(random(4 * Window)); err != nil {
		t.Fatal(err)
	}
	st := <-stalled
	// The data arrived whole, and the stream still works both ways.
	got := make([]byte, 4*Window)
	if _, err := io.ReadFull(st, got); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, dev, Target{Kind: Direct, Host: "fast"}, random(4*Window))
}

// A version 2 session refuses what breaks the announced limits.
func TestVersion2Violations(t *testing.T) {
	cases := map[string]func() []byte{
		"second settings frame": func() []byte { return appendSettings(appendSettings(nil, Window), Window) },
		"window over the announced one": func() []byte {
			return appendWindow(appendOpen(appendSettings(nil, Window), 1, Target{Kind: Direct}), 1, 1)
		},
		"data over the hub's window": func() []byte {
			b := appendOpen(nil, 1, Target{Kind: Direct, Host: "api"})
			for range DefaultWindow2/MaxData + 1 {
				b = appendData(b, 1, make([]byte, MaxData))
			}
			return b
		},
		"window below version 1's": func() []byte { return appendSettings(nil, Window-1) },
	}
	expectProtocolErrors(t, Options{Compress: true, Version2: true}, cases)
}

func TestFrameRoundTrip(t *testing.T) {
	tg := Target{Kind: Forwarded, Host: "http", Port: 80, OriginHost: "fd00::1", OriginPort: 65535}
	var b []byte
	b = appendOpen(b, 2, tg)
	b = appendData(b, 2, []byte("hello"))
	b = appendWindow(b, 2, 1234)
	b = appendHeader(b, frameEOF, 2)
	b = appendReset(b, 2, strings.Repeat("r", 2*maxReason)) // truncated on the way out
	r := bufio.NewReader(bytes.NewReader(b))
	buf := make([]byte, MaxData)
	want := []string{
		fmt.Sprintf("1 2 %+v", tg), "2 2 hello", "3 2 1234", "4 2", "5 2 " + strings.Repeat("r", maxReason),
	}
	for _, w := range want {
		f, err := readFrame(r, buf)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("%d %d", f.typ, f.id)
		switch f.typ {
		case frameOpen:
			got += fmt.Sprintf(" %+v", f.target)
		case frameData:
			got += " " + string(f.data)
		case frameWindow:
			got += fmt.Sprint(" ", f.incr)
		case frameReset:
			got += " " + f.reason
		}
		if got != w {
			t.Fatalf("frame %q, want %q", got, w)
		}
	}
	if _, err := readFrame(r, buf); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}
