package mqttbroker

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/nettest"
)

// Which clients can wait in the poller: a plain socket can; TLS 1.2 (crypto/tls cannot
// say what input it holds) and a connection with no socket beneath keep a goroutine.
func TestWatchable(t *testing.T) {
	hub, _ := nettest.TCPPair(t)
	if raw, sc, held := watchable(hub); sc == nil || raw != hub || held() {
		t.Fatal("a plain socket is not watchable")
	}
	if _, sc, _ := watchable(tls.Server(hub, &tls.Config{})); sc != nil {
		t.Fatal("a *tls.Conn was watchable")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, sc, _ := watchable(a); sc != nil {
		t.Fatal("a connection with no socket beneath was watchable")
	}
}

// inputWithin waits for input without taking it, and puts back the read deadline mochi
// set.
func TestInputWithin(t *testing.T) {
	hub, client := nettest.TCPPair(t)
	c := &lingeringConn{Conn: hub}
	keepalive := time.Now().Add(time.Hour)
	c.SetDeadline(keepalive)
	rc, err := hub.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if c.inputWithin(rc, hub, time.Millisecond) {
		t.Fatal("input reported on a silent connection")
	}
	// The deadline is mochi's again: with inputWithin's limit (passed) still set, this
	// read would fail at once with a timeout, input or not.
	client.Write([]byte("x"))
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	client.Write([]byte("y"))
	if !c.inputWithin(rc, hub, time.Minute) {
		t.Fatal("input not reported")
	}
	if !c.inputWithin(rc, hub, time.Minute) {
		t.Fatal("the input was taken by the look")
	}
	if _, err := c.Read(buf); err != nil || buf[0] != 'y' {
		t.Fatalf("read %q, %v", buf, err)
	}
	if got := c.readDeadline(); !got.Equal(keepalive) {
		t.Fatalf("read deadline %v, want mochi's %v", got, keepalive)
	}
}
