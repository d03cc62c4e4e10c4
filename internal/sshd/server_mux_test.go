package sshd

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// TestMuxBrokenFramingEndsSession: the hub serves the multiplexed channel without a
// goroutine waiting on it; a device that breaks the framing still loses its session and
// the break is recorded as a violation. Requests on the channel (the protocol has none)
// are refused, and the session keeps serving meanwhile.
func TestMuxBrokenFramingEndsSession(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), nil)
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	ch, _, err := conn.OpenChannel(sshext.MuxChannel, ssh.Marshal(sshext.MuxOpen{Mode: sshext.MuxPlain + sshext.MuxV2}))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := ch.SendRequest("anything", true, nil); ok || err != nil {
		t.Fatalf("request on the multiplexed channel: ok %v, err %v; want refused", ok, err)
	}
	if ok, _, err := conn.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"http", 0})); !ok || err != nil {
		t.Fatalf("forward request after the channel's request: ok %v, err %v", ok, err)
	}
	// Data (type 2) for stream 7, which the device never opened: a protocol error.
	if _, err := ch.Write([]byte{2, 7, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Wait(); err == nil {
		t.Fatal("connection did not end")
	}
	d, err := f.reg.Device(context.Background(), "dev1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Violations < 1 {
		t.Fatalf("violations %d, want the broken framing counted", d.Violations)
	}
	evs, err := f.reg.Events(context.Background(), registry.EventFilter{Device: "dev1"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || strings.Contains(e.Detail, "multiplexed channel")
	}
	if !found {
		t.Fatalf("no event names the multiplexed channel: %+v", evs)
	}
}
