package hub

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshtest"
)

// startTestHub runs a hub in this process on a SQLite registry in a fresh folder, its
// kernel layer off (the host's ruleset is not the test's; access_kernel_test.go in the e2e
// suite covers it in namespaces of its own).
func startTestHub(t *testing.T) *Hub {
	t.Helper()
	cfg, err := ParseConfig([]byte("access: {kernel: off}\npool: {cidr: 127.86.0.0/24}\nssh: {listen: 127.0.0.1:0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Start(context.Background(), cfg, Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// enrollAndConnect enrolls name through the hub's change path and logs it in with
// x/crypto's SSH client; the returned channel closes when the hub ends the session.
func enrollAndConnect(t *testing.T, h *Hub, name string) <-chan struct{} {
	t.Helper()
	signer := sshtest.Signer(t)
	line := string(ssh.MarshalAuthorizedKey(signer.PublicKey()))
	if _, err := h.Control().Apply(context.Background(), control.AddDevice{Name: name, Profile: "default", Key: line}); err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", h.SSHAddr().String(), &ssh.ClientConfig{
		User: name, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(h.HostKeys()[0]),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ended := make(chan struct{})
	go func() { c.Wait(); close(ended) }()
	return ended
}

// A revocation sent over the admin socket (what the CLI does) closes the live session
// before the reply, which says so; the device is refused from then on.
func TestAdminChangeClosesTheSession(t *testing.T) {
	h := startTestHub(t)
	ended := enrollAndConnect(t, h, "dev1")
	env, err := control.Wrap(control.RevokeDevice{Device: "dev1", Reason: "stolen"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := admin.Call(filepath.Join(h.dir, admin.SocketName), admin.Request{Op: admin.OpChange, Change: &env})
	if err != nil || rep.Outcome == nil || rep.Outcome.Closed != 1 {
		t.Fatalf("reply %+v, %v", rep, err)
	}
	<-ended
	d, err := h.Registry().Device(context.Background(), "dev1")
	if err != nil || !d.Revoked() {
		t.Fatalf("registry: %+v %v", d, err)
	}
	// A malformed change over the socket gets the change path's error, and nothing happens.
	bad := control.Envelope{Op: "device.remove", Change: []byte(`{"device":""}`)}
	if _, err := admin.Call(filepath.Join(h.dir, admin.SocketName), admin.Request{Op: admin.OpChange, Change: &bad}); err == nil {
		t.Fatal("a change without a device was accepted")
	}
}

// A change written by another process (the CLI while the admin socket was unreachable)
// reaches the live session through the hub's change feed.
func TestFeedClosesWhatAnotherProcessRevoked(t *testing.T) {
	h := startTestHub(t)
	ended := enrollAndConnect(t, h, "dev1")
	other, err := registry.Open(context.Background(), h.dir, sockets.Config{CIDR: "127.86.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := control.New(other, nil).Apply(context.Background(), control.RemoveDevice{Device: "dev1"}); err != nil {
		t.Fatal(err)
	}
	<-ended
	if _, err := h.Registry().Device(context.Background(), "dev1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("removed device: %v", err)
	}
}
