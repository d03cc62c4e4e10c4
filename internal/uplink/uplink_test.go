package uplink_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/sshtest"
	"github.com/iotsafe/iotsafe/internal/tunnel"
	"github.com/iotsafe/iotsafe/internal/uplink"
)

func newSigner(t *testing.T) ssh.Signer {
	return sshtest.Signer(t)
}

// local is the gateway's own SSH server as the uplink sees it: the devices connected
// here and what they serve. A test double of our own interface (the real one is sshd,
// which the e2e gateway tests run with OpenSSH devices); RelayTo answers each relayed
// connection with "DEVICE/ALIAS: " and echoes what it reads.
type local struct {
	mu      sync.Mutex
	serving map[string][]string
}

func (l *local) Serving(device string) (sshd.Served, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.serving[device]
	return sshd.Served{Aliases: a, Key: "SHA256:test", Client: "SSH-2.0-test", Remote: "192.0.2.1:1"}, ok
}

func (l *local) ServingDevices() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for d := range l.serving {
		out = append(out, d)
	}
	return out
}

func (l *local) RelayTo(device, alias, _ string, _ uint32, accept func() (tunnel.Stream, error)) error {
	st, err := accept()
	if err != nil {
		return err
	}
	go func() {
		defer st.Close()
		io.WriteString(st, device+"/"+alias+": ")
		io.Copy(st, st)
	}()
	return nil
}

// centre is a centre hub's SSH server on a SQLite registry, with a gateway gw1 whose
// profile lets it announce cam-* devices.
type centre struct {
	reg  *registry.Registry
	srv  *sshd.Server
	addr string
	host ssh.PublicKey
}

func startCentre(t *testing.T, gwKey ssh.PublicKey) *centre {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.87.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	p := profile.Default()
	p.Name, p.Gateway = "site-gw", &profile.GatewayPolicy{MaxDevices: 3, Devices: []string{"cam-*"}}
	if err := reg.PutProfile(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.AddDevice(ctx, "gw1", "site-gw", gwKey); err != nil {
		t.Fatal(err)
	}
	host := newSigner(t)
	srv, err := sshd.New(sshd.Config{Listen: "127.0.0.1:0"}, reg, []ssh.Signer{host})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return &centre{reg: reg, srv: srv, addr: addr.String(), host: host.PublicKey()}
}

// A gateway announces its devices over one session: the centre enrolls those its profile
// allows (behind the gateway, with a protected socket that reaches the device through
// the gateway) and refuses the others; a device revoked at the centre is revoked here.
func TestUplinkAnnouncesRelaysAndHearsRevocations(t *testing.T) {
	gw := newSigner(t)
	c := startCentre(t, gw.PublicKey())
	l := &local{serving: map[string][]string{"cam-1": {"http"}, "door-1": {"http"}}}
	synced := make(chan struct{}, 10)
	revoked := make(chan string, 10)
	up, err := uplink.New(uplink.Config{
		Hub: c.addr, Name: "gw1", Signer: gw, HostKey: ssh.FixedHostKey(c.host), Local: l,
		Revoked:  func(device, reason string) { revoked <- device },
		OnSynced: func() { synced <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()
	<-synced
	if st := up.Status(); st.State != "connected" || st.Announced != 1 || st.Refused != 1 {
		t.Fatalf("status %+v: want connected, cam-1 announced, door-1 refused", st)
	}
	d, err := c.reg.Device(ctx, "cam-1")
	if err != nil || d.Via != "gw1" || len(d.Sockets) != 1 {
		t.Fatalf("cam-1 at the centre: %+v %v", d, err)
	}
	if _, err := c.reg.Device(ctx, "door-1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("door-1 enrolled at the centre: %v", err)
	}

	// A platform process connects to cam-1's protected socket at the centre: the
	// connection reaches the device through the gateway's session.
	conn, err := net.Dial("tcp", d.Sockets[0].Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "ping")
	want := "cam-1/http: ping"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
		t.Fatalf("through the gateway: %q %v", got, err)
	}

	// Revoked at the centre: the centre tells the gateway, which revokes it too.
	if err := c.reg.RevokeDevice(ctx, "cam-1", "stolen"); err != nil {
		t.Fatal(err)
	}
	c.srv.KickKey("cam-1", "", "key revoked")
	select {
	case dev := <-revoked:
		if dev != "cam-1" {
			t.Fatalf("revoked %q", dev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway never heard of the revocation")
	}
}

// A gateway whose pinned host key is not the centre's stops at once instead of retrying.
func TestUplinkStopsOnAWrongHostKey(t *testing.T) {
	gw := newSigner(t)
	c := startCentre(t, gw.PublicKey())
	up, err := uplink.New(uplink.Config{Hub: c.addr, Name: "gw1", Signer: gw,
		HostKey: ssh.FixedHostKey(newSigner(t).PublicKey()), Local: &local{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Run(context.Background()); err == nil || up.Status().State != "stopped" {
		t.Fatalf("Run: %v, status %+v", err, up.Status())
	}
	if _, err := uplink.New(uplink.Config{Hub: c.addr}); err == nil {
		t.Fatal("a config without name, key and local server was accepted")
	}
}

// A centre that completes the handshake and then answers nothing does not hold the
// gateway: the session ends after the handshake timeout with agent.ErrSetupTimeout, and
// the gateway connects again.
func TestUplinkLeavesACentreThatAnswersNothing(t *testing.T) {
	addr, host, sessions := sshtest.SilentServer(t)
	retries := sshtest.NewRetries()
	up, err := uplink.New(uplink.Config{Hub: addr, Name: "gw1", Signer: newSigner(t), HostKey: ssh.FixedHostKey(host), Local: &local{},
		// Short, so the test is quick; a handshake that misses it under load is retried.
		HandshakeTimeout: time.Second, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond,
		OnRetry: retries.OnRetry})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- up.Run(ctx) }()
	retries.Await(t, agent.ErrSetupTimeout)
	<-sessions
	<-sessions // it connected again
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}
