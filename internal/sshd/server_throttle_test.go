package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshwire"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// dialFrom connects from a chosen loopback source address.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func handshake(c net.Conn, addr, user string, key ssh.Signer, host ssh.PublicKey) (ssh.Conn, error) {
	conn, _, reqs, err := ssh.NewClientConn(c, addr, &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)}, HostKeyCallback: ssh.FixedHostKey(host),
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	go ssh.DiscardRequests(reqs)
	return conn, nil
}

// A source whose handshakes only fail is held back, with a bounded queue, while devices
// from other addresses connect as usual.
func TestFailingSourceIsThrottledOthersAreNot(t *testing.T) {
	const startups, queue = 4, 8
	failed := make(chan struct{}, 100)
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) {
		c.Metrics = handshakeWatch{failed: failed}
		c.HandshakeTimeout = time.Minute
		// Failures are forgiven so slowly that the test sees the source penalized throughout.
		c.PerSource = throttle.Config{Startups: startups, FailureRate: 0.0001, Queue: queue}
	})
	const flooder = "127.0.0.2"
	stranger := signer(t)
	for i := 0; i < startups; i++ {
		if _, err := handshake(dialFrom(t, flooder, f.addr), f.addr, "dev1", stranger, f.host); err == nil {
			t.Fatal("an unknown key was admitted")
		}
		<-failed // the server has charged the failure
	}
	if !f.srv.perSource.Penalized(netip.MustParseAddr(flooder)) {
		t.Fatal("after its startups failed, the flooding source is not penalized")
	}
	// More connections from the flooder: `queue` of them wait without a banner, the rest
	// are dropped at once.
	const extra = 20
	dropped := make(chan bool, extra)
	var flood []net.Conn
	for i := 0; i < extra; i++ {
		c := dialFrom(t, flooder, f.addr)
		flood = append(flood, c)
		go func() {
			buf := make([]byte, 4)
			n, err := c.Read(buf)
			dropped <- n == 0 && err == io.EOF
		}()
	}
	for i := 0; i < extra-queue; i++ {
		if !<-dropped {
			t.Fatal("a connection over the source's queue got something other than a close")
		}
	}
	// Meanwhile a device from another address connects normally.
	conn, err := handshake(dialFrom(t, "127.0.0.3", f.addr), f.addr, "dev1", f.device, f.host)
	if err != nil {
		t.Fatalf("a device from another address was kept out by the flood: %v", err)
	}
	conn.Close()
	select {
	case d := <-dropped:
		t.Fatalf("a queued flood connection ended early (dropped=%v) although the source is still penalized", d)
	default:
	}
	for _, c := range flood {
		c.Close()
	}
}

// handshakeWatch signals every failed handshake once the server has accounted for it.
type handshakeWatch struct {
	nopMetrics
	failed chan struct{}
}

func (w handshakeWatch) Handshake(ok bool) {
	if !ok {
		w.failed <- struct{}{}
	}
}

// A revoked device that keeps retrying writes one auth_refused event a minute per source,
// not one per attempt.
func TestRefusedLoginsAreAggregated(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) {
		c.PerSource = throttle.Config{Startups: 1000, FailureRate: 1000}
	})
	ctx := context.Background()
	if err := f.reg.RevokeDevice(ctx, "dev1", "stolen"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := handshake(c, f.addr, "dev1", f.device, f.host); err == nil {
			t.Fatal("a revoked key was admitted")
		}
	}
	evs, err := f.reg.Events(ctx, registry.EventFilter{Device: "dev1", Kind: registry.EventAuthRefused})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("%d auth_refused events for 20 attempts within a minute, want 1", len(evs))
	}
}

// Refused forward requests count toward the same budget as refused channel opens: a
// device asking for an alias its profile lacks, in a loop, loses its connection.
func TestRefusedForwardRequestsEndTheSession(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) { c.MaxRejectedChannels = 5 })
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans {
			nc.Reject(ssh.Prohibited, "")
		}
	}()
	var err error
	for i := 0; i < 50 && err == nil; i++ {
		_, _, err = conn.SendRequest("tcpip-forward", true, ssh.Marshal(sshwire.ForwardRequest{Addr: "nope", Port: 0}))
	}
	if err == nil {
		t.Fatal("50 refused forward requests and the connection is still open")
	}
	conn.Wait()
	evs, _ := f.reg.Events(context.Background(), registry.EventFilter{Device: "dev1", Kind: registry.EventViolation})
	if len(evs) > 10 {
		t.Fatalf("%d violation events for a budget of 5", len(evs))
	}
}

// Past the hub-wide memory budget for forwarded connections a new one is refused with the
// reason, not counted as the device's violation; closing one makes room.
func TestForwardMemoryBudget(t *testing.T) {
	target := echoServer(t)
	f := newFixture(t, testProfile(fmt.Sprintf("name: p\ndirect: {echo: %q}\nmax_channels: 10\n", target)), func(c *Config) {
		c.ForwardMemoryMiB = 5 // two connections of 2.5 MiB
	})
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	go func() {
		for range chans {
		}
	}()
	first, closed, err := openDirect(conn, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := openDirect(conn, "echo"); err != nil {
		t.Fatal(err)
	}
	_, _, err = openDirect(conn, "echo")
	var oce *ssh.OpenChannelError
	if !errors.As(err, &oce) || oce.Reason != ssh.ResourceShortage || !strings.Contains(oce.Message, "memory budget") {
		t.Fatalf("third connection: %v", err)
	}
	if d, _ := f.reg.Device(context.Background(), "dev1"); d.Violations != 0 {
		t.Fatalf("the hub's budget counted as the device's violation (%d)", d.Violations)
	}
	first.CloseWrite()
	io.Copy(io.Discard, first)
	<-closed
	if _, _, err := openDirect(conn, "echo"); err != nil {
		t.Fatalf("after one closed: %v", err)
	}
}
