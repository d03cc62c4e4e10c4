package access

import (
	"context"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/nettest"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// The enforcer on a real SQLite registry, kernel layer off: a unit test must never touch
// the host's nftables (the e2e suite runs the kernel layer in its own namespace).
func TestEnforcerDecidesAuditsAndReloads(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.89.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	e, err := NewEnforcer(Layers{UserSpace: true, Kernel: "off"}, reg, reg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	user := Identity{UID: 4242, Name: "ops", GIDs: []uint32{4242}}
	err = e.Check(user, "dev42", "http", "resolve")
	if err == nil || !strings.Contains(err.Error(), "permission denied: uid 4242 (ops) may not reach dev42/http") {
		t.Fatalf("no grant: %v", err)
	}
	// A second refusal within the interval is counted, not written.
	e.Check(user, "dev43", "http", "resolve")
	denied, err := reg.Events(ctx, registry.EventFilter{Kind: registry.EventAccessDenied})
	if err != nil {
		t.Fatal(err)
	}
	if len(denied) != 1 || denied[0].Device != "dev42" || !strings.HasPrefix(denied[0].Detail, "resolve: permission denied") {
		t.Fatalf("audit: %+v", denied)
	}
	// A grant reaches the enforcer at its reload, and Current says which changes it holds.
	if err := reg.AddGrant(ctx, registry.Grant{Kind: registry.PrincipalUser, Name: "ops", XID: 4242, Target: "dev42", Alias: "http"}); err != nil {
		t.Fatal(err)
	}
	last, err := reg.LastChangeID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e.Current(last) {
		t.Fatal("Current before the reload")
	}
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.Current(last) {
		t.Fatal("not Current after the reload")
	}
	if err := e.Check(user, "dev42", "http", "connect"); err != nil {
		t.Fatalf("granted: %v", err)
	}
	if err := e.Check(user, "dev42", "ssh", "connect"); err == nil {
		t.Fatal("another alias allowed")
	}
	if !e.Policy().Allowed(user, "dev42", "http") {
		t.Fatal("Policy disagrees with Check")
	}
}

// The user-space layer: a connection from this process's own uid (the hub's services)
// passes; with the layer off there is no check at all.
func TestEnforcerConnectionCheck(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.89.1.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	off, err := NewEnforcer(Layers{UserSpace: false, Kernel: "off"}, reg, reg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if off.ConnectionCheck() != nil {
		t.Fatal("a check with access.userspace off")
	}
	on, err := NewEnforcer(Layers{UserSpace: true, Kernel: "off"}, reg, reg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := nettest.TCPPair(t)
	if err := on.ConnectionCheck()(srv, "dev42", "http"); err != nil {
		t.Fatalf("own uid refused: %v", err)
	}
	if _, err := NewEnforcer(Layers{Kernel: "maybe"}, reg, reg, nil, nil); err == nil {
		t.Fatal("an unknown kernel mode accepted")
	}
}
