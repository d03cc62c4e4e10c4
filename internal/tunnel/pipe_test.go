package tunnel

import (
	"io"
	"net"
	"testing"

	"golang.org/x/crypto/ssh"
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
	done := make(chan [2]int64, 1)
	released := make(chan struct{})
	go func() {
		a, b := Pipe(pipeChannel{chanEnd}, connEnd, func() { close(released) })
		done <- [2]int64{a, b}
	}()
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
	n := <-done
	<-released
	if n[0] != 7 || n[1] != 17 {
		t.Fatalf("counts %v", n)
	}
}

// A device side that fails (here: reset) reaches the local client as a reset, never as
// a clean end it could take for a complete answer.
func TestPipeAbortIsNotAnEnd(t *testing.T) {
	devEnd, chanEnd := pair()
	connEnd, platEnd := pair()
	go Pipe(pipeChannel{chanEnd}, connEnd, nil)
	platEnd.Write([]byte("GET /"))
	io.ReadFull(devEnd, make([]byte, 5))
	devEnd.Write([]byte("HTTP/1.0 200 OK\r\n\r\npart of a bo"))
	devEnd.(*net.TCPConn).SetLinger(0)
	devEnd.Close() // reset: the device side's read fails
	got, err := io.ReadAll(platEnd)
	if err == nil {
		t.Fatalf("the client read %q and a clean end after the device side failed", got)
	}
}
