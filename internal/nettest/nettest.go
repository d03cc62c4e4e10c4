package nettest

import (
	"net"
	"testing"
)

// TCPPair is a loopback TCP connection: the accepted end (a server's) and the dialled
// one (its peer's), both closed when the test ends.
func TCPPair(t testing.TB) (server *net.TCPConn, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); c.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}
