package deviceconn

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/iotsafe/iotsafe/internal/nettest"
)

// A connection handed over in process carries its device's identity to the server,
// passes bytes both ways with half-close, and a closed listener refuses new ones.
func TestDialCarriesIdentity(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	l := NewListener(addr)
	id := Identity{Device: "dev1", Gen: 42, Address: netip.MustParseAddr("127.77.0.5")}
	hub, err := l.Dial(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := Of(srv)
	if !ok || got != id {
		t.Fatalf("identity %+v %v", got, ok)
	}
	if srv.RemoteAddr().String() != "127.77.0.5:0" || srv.LocalAddr() != addr {
		t.Fatalf("addresses %v %v", srv.RemoteAddr(), srv.LocalAddr())
	}
	if _, ok := Of(hub); ok {
		t.Fatal("the hub's end claims an identity")
	}
	go func() {
		hub.Write([]byte("ping"))
		hub.(interface{ CloseWrite() error }).CloseWrite()
	}()
	b, err := io.ReadAll(srv)
	if err != nil || string(b) != "ping" {
		t.Fatalf("read %q %v", b, err)
	}
	srv.Write([]byte("pong"))
	srv.Close()
	if b, _ := io.ReadAll(hub); string(b) != "pong" {
		t.Fatalf("answer %q", b)
	}
	hub.Close()

	l.Close()
	if _, err := l.Dial(context.Background(), id); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("dial after close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}

// A server that does not accept makes Dial wait only as long as its context.
func TestDialWaitsForItsContext(t *testing.T) {
	l := NewListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1})
	defer l.Close()
	for range acceptQueue {
		if _, err := l.Dial(context.Background(), Identity{Device: "d"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Dial(ctx, Identity{Device: "d"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("dial to a full queue: %v", err)
	}
}

func TestServicesLookup(t *testing.T) {
	var s Services
	rest := NewListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	mqtt := NewListener(&net.TCPAddr{IP: net.IPv4zero, Port: 1883})
	s.Add(rest)
	s.Add(mqtt)
	for target, want := range map[string]*Listener{
		"127.0.0.1:8080": rest, "localhost:8080": rest, "127.0.0.2:8080": nil, "127.0.0.1:8081": nil,
		"127.0.0.1:1883": mqtt, "[::1]:1883": mqtt, "192.0.2.1:1883": nil, "rest": nil, "example.com:8080": nil,
	} {
		if got := s.Lookup(target); got != want {
			t.Errorf("%s: got %v, want %v", target, got, want)
		}
	}
	s.Remove(rest)
	if s.Lookup("127.0.0.1:8080") != nil {
		t.Fatal("removed listener still found")
	}
	var none *Services
	if none.Lookup("127.0.0.1:8080") != nil {
		t.Fatal("nil Services found something")
	}
}

// FromHub is true for a TCP connection this process (the hub's uid) opened, false for
// what is not TCP. (Another uid's connection is refused in test/e2e, which runs one.)
func TestFromHub(t *testing.T) {
	s, _ := nettest.TCPPair(t)
	if !FromHub(s) {
		t.Fatal("the hub's own connection is not recognised")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if FromHub(a) {
		t.Fatal("a pipe counts as the hub's TCP connection")
	}
}
