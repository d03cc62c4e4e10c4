package tunnel

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/zmux"
)

// pipeChannel wraps a loopback TCP connection as an ssh.Channel; x/crypto offers no
// standalone channel, so this is the one stand-in: Pipe only uses the io and CloseWrite
// methods, which net.Conn provides.
type pipeChannel struct{ net.Conn }

func (p pipeChannel) CloseWrite() error                              { return p.Conn.(interface{ CloseWrite() error }).CloseWrite() }
func (p pipeChannel) SendRequest(string, bool, []byte) (bool, error) { return false, nil }
func (p pipeChannel) Stderr() io.ReadWriter                          { return nil }

var _ ssh.Channel = pipeChannel{}

// pair is a real TCP connection on loopback, both ends.
func pair() (net.Conn, net.Conn) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	a, _ := net.Dial("tcp", ln.Addr().String())
	b, _ := ln.Accept()
	return a, b
}

// Half-close in one direction must not cut the other: a request whose sender has
// finished writing still gets its whole response.
func TestPipeHalfClose(t *testing.T) {
	// Two real TCP pairs: device side (channel) and platform side (conn).
	devEnd, chanEnd := pair()
	connEnd, platEnd := pair()
	done := make(chan Result, 1)
	released := make(chan struct{})
	go func() { done <- Pipe(pipeChannel{chanEnd}, connEnd, func() { close(released) }) }()
	platEnd.Write([]byte("request"))
	platEnd.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(io.LimitReader(devEnd, 7))
	if string(got) != "request" {
		t.Fatalf("device got %q", got)
	}
	devEnd.Write([]byte("a longer response"))
	devEnd.(*net.TCPConn).CloseWrite()
	resp, _ := io.ReadAll(platEnd)
	if string(resp) != "a longer response" {
		t.Fatalf("platform got %q", resp)
	}
	r := <-done
	<-released
	if r.ToChannel != 7 || r.FromChannel != 17 || r.Aborted != nil {
		t.Fatalf("result %+v, want 7 bytes to the device, 17 back and a clean end", r)
	}
}

// A device side that fails (here: reset) reaches the local client as a reset, never as
// a clean end it could take for a complete answer.
func TestPipeAbortIsNotAnEnd(t *testing.T) {
	devEnd, chanEnd := pair()
	connEnd, platEnd := pair()
	done := make(chan Result, 1)
	go func() { done <- Pipe(pipeChannel{chanEnd}, connEnd, nil) }()
	platEnd.Write([]byte("GET /"))
	io.ReadFull(devEnd, make([]byte, 5))
	devEnd.Write([]byte("HTTP/1.0 200 OK\r\n\r\npart of a bo"))
	devEnd.(*net.TCPConn).SetLinger(0)
	devEnd.Close() // reset: the device side's read fails
	got, err := io.ReadAll(platEnd)
	if err == nil {
		t.Fatalf("the client read %q and a clean end after the device side failed", got)
	}
	if r := <-done; r.Aborted == nil {
		t.Fatalf("Pipe reported a clean end: %+v", r)
	}
}

// muxPair is a multiplexed session over a real loopback TCP connection: a hub's end
// and a device's end.
func muxPair(t *testing.T) (hub, device *zmux.Session) {
	t.Helper()
	a, b := pair()
	hub, device = zmux.New(a, zmux.Options{Version2: true}), zmux.New(b, zmux.Options{Device: true, Version2: true})
	t.Cleanup(func() { hub.Close(); device.Close() })
	return hub, device
}

// A gateway pipes the centre's stream to its device's stream. When the device refuses
// (its service is down), the centre's end learns why, not just that it was reset: the
// reason is what an operator reads in the centre's log.
func TestPipeCarriesResetReasonAcrossStreams(t *testing.T) {
	centre, gwUp := muxPair(t)   // the centre's session to the gateway
	gwDown, device := muxPair(t) // the gateway's session to its device
	const why = "dial tcp 127.0.0.1:80: connect: connection refused"
	go func() { // the device: refuses every stream
		for {
			st, err := device.Accept()
			if err != nil {
				return
			}
			st.Reset(why)
		}
	}()
	done := make(chan Result, 1)
	go func() { // the gateway: relays one stream
		up, err := gwUp.Accept()
		if err != nil {
			return
		}
		down, err := gwDown.Open(zmux.Target{Kind: zmux.Forwarded, Host: "web"})
		if err != nil {
			return
		}
		done <- Pipe(down, up, nil)
	}()
	st, err := centre.Open(zmux.Target{Kind: zmux.Relayed, Host: "dev1/web"})
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	_, err = io.ReadAll(st)
	var re *zmux.ResetError
	if !errors.As(err, &re) || re.Reason != why {
		t.Fatalf("the centre read %v, want a reset saying %q", err, why)
	}
	if r := <-done; !errors.As(r.Aborted, &re) || re.Reason != why {
		t.Fatalf("the gateway's pipe reported %v", r.Aborted)
	}
}

// maxWrite records the largest write to a connection.
type maxWrite struct {
	net.Conn
	max atomic.Int64
}

func (w *maxWrite) Write(p []byte) (int, error) {
	for {
		m := w.max.Load()
		if int64(len(p)) <= m || w.max.CompareAndSwap(m, int64(len(p))) {
			break
		}
	}
	return w.Conn.Write(p)
}

// A bulk transfer from a local client into a multiplexed stream fills SSH packets
// rather than splitting each read into a full packet and one of a few bytes: no write
// of the session to its channel is over 32 KiB, frame headers included.
func TestPipeFillsPacketsOfAMultiplexedStream(t *testing.T) {
	a, b := pair()
	rec := &maxWrite{Conn: b}
	hub, device := zmux.New(a, zmux.Options{Version2: true}), zmux.New(rec, zmux.Options{Device: true, Version2: true})
	t.Cleanup(func() { hub.Close(); device.Close() })
	client, local := pair()
	go func() { // the device: its service sends a large answer
		st, err := device.Accept()
		if err != nil {
			return
		}
		Pipe(st, local, nil)
	}()
	st, err := hub.Open(zmux.Target{Kind: zmux.Forwarded, Host: "web"})
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	go func() {
		client.Write(make([]byte, size))
		client.(*net.TCPConn).CloseWrite()
	}()
	n, err := io.Copy(io.Discard, st)
	if err != nil || n != size {
		t.Fatalf("read %d bytes (%v), want %d", n, err, size)
	}
	if m := rec.max.Load(); m > 32<<10 {
		t.Fatalf("the device's session wrote %d bytes at once to its channel: more than one SSH packet", m)
	}
}
