package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshtest"
	"github.com/iotsafe/iotsafe/internal/sshwire"
)

type fixture struct {
	srv        *Server
	reg        *registry.Registry
	addr       string
	device     ssh.Signer
	host       ssh.PublicKey
	hostSigner ssh.Signer
}

func signer(t testing.TB) ssh.Signer {
	return sshtest.Signer(t)
}

// newFixture runs a server on loopback with a real registry and one device "dev1".
func newFixture(t testing.TB, prof *profile.Profile, tweak func(*Config)) *fixture {
	t.Helper()
	reg, err := registry.Open(context.Background(), t.TempDir(), sockets.Config{CIDR: "127.78.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if err := reg.PutProfile(context.Background(), prof); err != nil {
		t.Fatal(err)
	}
	dev := signer(t)
	if _, err := reg.AddDevice(context.Background(), "dev1", prof.Name, dev.PublicKey()); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
	if tweak != nil {
		tweak(&cfg)
	}
	cfg.ApplyDefaults()
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	host := signer(t)
	srv, err := New(cfg, reg, []ssh.Signer{host})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return &fixture{srv: srv, reg: reg, addr: addr.String(), device: dev, host: host.PublicKey(), hostSigner: host}
}

// dial connects as dev1 with the real x/crypto client; reqs is left to the caller.
func (f *fixture) dial(t testing.TB) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request) {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, chans, reqs, err := ssh.NewClientConn(c, f.addr, &ssh.ClientConfig{
		User: "dev1", Auth: []ssh.AuthMethod{ssh.PublicKeys(f.device)}, HostKeyCallback: ssh.FixedHostKey(f.host),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, chans, reqs
}

func testProfile(yaml string) *profile.Profile {
	p, err := profile.Parse([]byte(yaml))
	if err != nil {
		panic(err)
	}
	return p
}

// Each refused channel open costs the server memory (CVE-2026-39827): a client that
// keeps trying is disconnected after MaxRejectedChannels.
func TestRejectedChannelOpensAreBounded(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) { c.MaxRejectedChannels = 5 })
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans {
			nc.Reject(ssh.Prohibited, "")
		}
	}()
	var err error
	ended := sshext.Ended(conn) // an open racing the server's close is never answered by x/crypto
	for i := 0; i < 50 && err == nil || errors.As(err, new(*ssh.OpenChannelError)); i++ {
		_, _, err = sshext.OpenChannel(conn, ended, "session", nil)
	}
	if err == nil || errors.As(err, new(*ssh.OpenChannelError)) {
		t.Fatalf("connection still open after many refused opens: %v", err)
	}
	if err := conn.Wait(); err == nil {
		t.Fatal("connection did not end")
	}
	d, _ := f.reg.Device(context.Background(), "dev1")
	if d.Violations < 5 {
		t.Fatalf("violations %d, want >= 5", d.Violations)
	}
}

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// openDirect opens a direct-tcpip channel; closed is closed once the server has closed it.
func openDirect(conn ssh.Conn, alias string) (ch ssh.Channel, closed <-chan struct{}, err error) {
	ch, reqs, err := conn.OpenChannel("direct-tcpip", ssh.Marshal(sshwire.DirectTCPIP{Host: alias, Port: 1, OriginAddr: "127.0.0.1", OriginPort: 1}))
	done := make(chan struct{})
	if err == nil {
		go func() { ssh.DiscardRequests(reqs); close(done) }()
	}
	return ch, done, err
}

// Channels beyond max_channels are refused with resource-shortage; closing one frees a slot.
func TestChannelLimit(t *testing.T) {
	target := echoServer(t)
	f := newFixture(t, testProfile(fmt.Sprintf("name: p\ndirect: {echo: %q}\nmax_channels: 2\n", target)), nil)
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	go func() {
		for range chans {
		}
	}()
	var open []ssh.Channel
	var closed []<-chan struct{}
	for range 2 {
		ch, c, err := openDirect(conn, "echo")
		if err != nil {
			t.Fatal(err)
		}
		open, closed = append(open, ch), append(closed, c)
	}
	_, _, err := openDirect(conn, "echo")
	var oce *ssh.OpenChannelError
	if !errors.As(err, &oce) || oce.Reason != ssh.ResourceShortage {
		t.Fatalf("third channel: want ResourceShortage, got %v", err)
	}
	// An echo round trip proves the channel works; closing it frees a slot.
	open[0].Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(open[0], buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	// Half-close and wait for the server's close: it frees the slot before closing.
	open[0].CloseWrite()
	io.Copy(io.Discard, open[0])
	<-closed[0]
	ch, _, err := openDirect(conn, "echo")
	if err != nil {
		t.Fatalf("slot not freed after the channel ended: %v", err)
	}
	ch.Close()
	if _, _, err := openDirect(conn, "elsewhere"); !errors.As(err, &oce) || oce.Reason != ssh.Prohibited {
		t.Fatalf("unknown alias: want Prohibited, got %v", err)
	}
}

// A client that stops answering (it never reads its requests) is dropped by keepalive.
func TestKeepaliveDropsUnresponsiveSession(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) {
		c.KeepaliveInterval = 50 * time.Millisecond
		c.KeepaliveTimeout = 200 * time.Millisecond
	})
	conn, _, _ := f.dial(t) // requests never read: the client is frozen
	done := make(chan error, 1)
	go func() { done <- conn.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("unresponsive session was not dropped")
	}
	if f.srv.Online("dev1") {
		t.Fatal("device still online")
	}
}

func TestUnknownAndWrongUserRefused(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), nil)
	for _, tc := range []struct {
		user string
		key  ssh.Signer
	}{{"dev1", signer(t)}, {"dev2", f.device}} {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, err = ssh.NewClientConn(c, f.addr, &ssh.ClientConfig{
			User: tc.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(tc.key)}, HostKeyCallback: ssh.FixedHostKey(f.host),
		})
		if err == nil {
			t.Fatalf("%s with a wrong key was admitted", tc.user)
		}
	}
}

// FuzzForwardPayloads: whatever a device sends in a tcpip-forward or direct-tcpip
// payload, the decision never panics and only profile aliases are allowed.
func FuzzForwardPayloads(f *testing.F) {
	p := testProfile("name: p\nreverse: {http: 80, cam: 0}\ndirect: {broker: '127.0.0.1:1883'}\n")
	f.Add(ssh.Marshal(sshwire.ForwardRequest{Addr: "http", Port: 80}))
	f.Add(ssh.Marshal(sshwire.ForwardRequest{Addr: "cam", Port: 0}))
	f.Add(ssh.Marshal(sshwire.DirectTCPIP{Host: "broker", Port: 1883, OriginAddr: "127.0.0.1", OriginPort: 5}))
	f.Add([]byte{0, 0, 0, 200, 'x'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var fr sshwire.ForwardRequest
		if ssh.Unmarshal(payload, &fr) == nil && checkReverse(p, fr) == nil {
			if _, ok := p.Reverse[fr.Addr]; !ok {
				t.Fatalf("reverse %q allowed outside the profile", fr.Addr)
			}
		}
		if d, target, err := checkDirect(p, payload); err == nil && p.Direct[d.Host] != target {
			t.Fatalf("direct %q allowed outside the profile", d.Host)
		}
	})
}

// A zero Config is a safe one: New applies the defaults itself, so the server listens on
// loopback only and serves a device without the caller setting any limit.
func TestZeroConfigIsSafe(t *testing.T) {
	reg, err := registry.Open(context.Background(), t.TempDir(), sockets.Config{CIDR: "127.79.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	prof := testProfile("name: p\nreverse: {http: 80}\n")
	reg.PutProfile(context.Background(), prof)
	dev := signer(t)
	if _, err := reg.AddDevice(context.Background(), "dev1", "p", dev.PublicKey()); err != nil {
		t.Fatal(err)
	}
	host := signer(t)
	zero, err := New(Config{}, reg, []ssh.Signer{host})
	if err != nil {
		t.Fatal(err)
	}
	if zero.cfg.Listen != DefaultListen || !strings.HasPrefix(DefaultListen, "127.") {
		t.Fatalf("a zero Config listens on %q, want loopback", zero.cfg.Listen)
	}
	// The same with only a free port chosen serves a device (no zero limit left to trip on).
	srv, err := New(Config{Listen: "127.0.0.1:0"}, reg, []ssh.Signer{host})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go srv.Serve()
	f := &fixture{srv: srv, reg: reg, addr: addr.String(), device: dev, host: host.PublicKey(), hostSigner: host}
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	if ok, _, err := conn.SendRequest("tcpip-forward", true, ssh.Marshal(sshwire.ForwardRequest{Addr: "http"})); err != nil || !ok {
		t.Fatalf("forward on a zero-Config server: %v %v", ok, err)
	}
}

// A profile applied to live sessions closes those that logged in with another version;
// the device comes back under the new one (here: a lowered max_channels holds), and
// applying the same version again closes nothing.
func TestKickProfileAppliesTheNewVersion(t *testing.T) {
	target := echoServer(t)
	spec := func(max int) *profile.Profile {
		return testProfile(fmt.Sprintf("name: p\ndirect: {echo: %q}\nmax_channels: %d\n", target, max))
	}
	f := newFixture(t, spec(2), nil)
	old, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	if n := f.srv.KickProfile("p", "profile p changed"); n != 0 {
		t.Fatalf("closed %d sessions already under the stored version", n)
	}
	if err := f.reg.PutProfile(context.Background(), spec(1)); err != nil {
		t.Fatal(err)
	}
	if n := f.srv.KickProfile("p", "profile p changed"); n != 1 {
		t.Fatalf("closed %d sessions, want the one under the old version", n)
	}
	if err := old.Wait(); err == nil {
		t.Fatal("the old session ended cleanly?")
	}
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	go func() {
		for range chans {
		}
	}()
	if _, _, err := openDirect(conn, "echo"); err != nil {
		t.Fatal(err)
	}
	var oce *ssh.OpenChannelError
	if _, _, err := openDirect(conn, "echo"); !errors.As(err, &oce) || oce.Reason != ssh.ResourceShortage {
		t.Fatalf("second channel under max_channels 1: %v", err)
	}
	if n := f.srv.KickProfile("p", "profile p changed"); n != 0 {
		t.Fatalf("the same version applied again closed %d sessions", n)
	}
}

// A closed session's keepalive timer is stopped: the session, its connection and
// buffers are not held until the timer would have fired (an interval later).
func TestClosedSessionStopsItsKeepaliveTimer(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) { c.KeepaliveInterval = time.Hour })
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	// Answered once the session serves its requests, after its keepalive is armed.
	if _, _, err := conn.SendRequest("nosuch@iotsafe.dev", true, nil); err != nil {
		t.Fatal(err)
	}
	f.srv.mu.Lock()
	ss := f.srv.devices["dev1"].sessions[0]
	f.srv.mu.Unlock()
	if ss.keepaliveTimer.Load() == nil {
		t.Fatal("no keepalive armed")
	}
	if n := f.srv.Kick("dev1", "test"); n != 1 {
		t.Fatalf("kicked %d", n)
	}
	if ss.keepaliveTimer.Load().Stop() {
		t.Fatal("the closed session's keepalive timer was still pending")
	}
}
