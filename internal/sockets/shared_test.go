package sockets

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
)

// freeLoopbackPort is a port no local address uses now.
func freeLoopbackPort(t *testing.T) uint16 {
	t.Helper()
	ln, err := listenLoopbackPort(sharedKey{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func greet(msg string) func(net.Conn) {
	return func(c net.Conn) {
		fmt.Fprint(c, msg)
		c.Close()
	}
}

func read(t *testing.T, a netip.AddrPort) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", a.String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	return string(b), err
}

// Many protected sockets on one port share one listener; each connection reaches the
// socket its destination names, any other destination is reset, and the port is freed
// with its last socket.
func TestSharedListenersRouteByDestination(t *testing.T) {
	s := NewShared(nil)
	defer s.Close()
	port := freeLoopbackPort(t)
	var closers []io.Closer
	for i := 1; i <= 50; i++ {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 78, 0, byte(i)}), port)
		c, err := s.Handle(a, greet(fmt.Sprintf("socket %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, c)
	}
	if n := s.Listeners(); n != 1 {
		t.Fatalf("%d listeners for 50 sockets on one port", n)
	}
	for _, i := range []int{1, 17, 50} {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 78, 0, byte(i)}), port)
		if got, err := read(t, a); err != nil || got != fmt.Sprintf("socket %d", i) {
			t.Fatalf("%s: %q %v", a, got, err)
		}
	}
	if _, err := s.Handle(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 78, 0, 1}), port), greet("twice")); err == nil {
		t.Fatal("one address served twice")
	}
	// Not a socket (an address of the pool nobody serves, the host's own loopback).
	for _, a := range []string{"127.78.0.99", "127.0.0.1"} {
		got, err := read(t, netip.AddrPortFrom(netip.MustParseAddr(a), port))
		if !errors.Is(err, syscall.ECONNRESET) || got != "" {
			t.Fatalf("%s: want a reset, got %q %v", a, got, err)
		}
	}
	// A socket stopped is reset; the last one frees the port.
	closers[0].Close()
	if _, err := read(t, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 78, 0, 1}), port)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a stopped socket: %v", err)
	}
	for _, c := range closers[1:] {
		c.Close()
	}
	if n := s.Listeners(); n != 0 {
		t.Fatalf("%d listeners left", n)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("the port stayed taken: %v", err)
	}
	ln.Close()
}

// A port taken on some local address (another hub, another program) is a clear error
// naming pool.port_base.
func TestSharedListenerPortTaken(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	port := uint16(other.Addr().(*net.TCPAddr).Port)
	s := NewShared(nil)
	defer s.Close()
	_, err = s.Handle(netip.AddrPortFrom(netip.MustParseAddr("127.78.0.1"), port), greet("x"))
	if err == nil || !strings.Contains(err.Error(), "pool.port_base") {
		t.Fatalf("want an error naming pool.port_base, got %v", err)
	}
}
