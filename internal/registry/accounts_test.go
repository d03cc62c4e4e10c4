package registry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestAccountsTokensAndTheirGrants(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	a, err := r.AddAccount(ctx, "alice", "$argon2id$fake")
	if err != nil || !a.HasPass {
		t.Fatalf("%+v %v", a, err)
	}
	if _, err := r.AddAccount(ctx, "alice", ""); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := r.AddAccount(ctx, "Alice!", ""); err == nil {
		t.Fatal("invalid name accepted")
	}
	if err := r.AddGrant(ctx, Grant{Kind: PrincipalAccount, Name: "alice", XID: uint32(a.ID), Target: "dev42", Alias: "http"}); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	live, _ := r.AddToken(ctx, "alice", "laptop", "hash-live", nil)
	r.AddToken(ctx, "alice", "old", "hash-expired", &past)
	if _, err := r.AddToken(ctx, "nobody", "", "hash-x", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("token for unknown account: %v", err)
	}
	if a, _ = r.Account(ctx, "alice"); a.Tokens != 1 {
		t.Fatalf("active tokens %d, want 1 (one expired)", a.Tokens)
	}
	if err := r.RevokeToken(ctx, "alice", live); err != nil {
		t.Fatal(err)
	}
	if err := r.RevokeToken(ctx, "alice", live); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	toks, _ := r.Tokens(ctx, "alice")
	if len(toks) != 2 || toks[0].Usable(time.Now()) || toks[1].Usable(time.Now()) {
		t.Fatalf("tokens %+v", toks)
	}
	// Removal takes the grants and tokens along; a new account of the same name starts empty.
	if err := r.RemoveAccount(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if gs, _ := r.Grants(ctx); len(gs) != 0 {
		t.Fatalf("grants left: %+v", gs)
	}
	if toks, _ := r.Tokens(ctx, ""); len(toks) != 0 {
		t.Fatalf("tokens left: %+v", toks)
	}
	b, _ := r.AddAccount(ctx, "alice", "")
	if b.ID == a.ID {
		t.Fatal("a re-created account reuses the old id (and would inherit grants)")
	}
}

func TestRoute(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if _, err := r.Route(ctx, "dev42", "http"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown device: %v", err)
	}
	if _, err := r.AddDevice(ctx, "dev42", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	rt, err := r.Route(ctx, "dev42", "http")
	if err != nil || rt.Addr == nil || rt.LastSeen != nil || rt.Revoked {
		t.Fatalf("%+v %v", rt, err)
	}
	if rt, _ := r.Route(ctx, "dev42", "cam"); rt.Addr != nil {
		t.Fatalf("alias never offered has a socket: %+v", rt)
	}
}

// Grants naming a device go with its removal: the device enrolled again under the same
// name starts with none (issue 48, item 14); grants on its groups and other devices stay.
func TestGrantsGoWithTheDevice(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	a, _ := r.AddAccount(ctx, "ctl", "")
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t), "valves"); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"dev1", "@valves", "dev2"} {
		if err := r.AddGrant(ctx, Grant{Kind: PrincipalAccount, Name: "ctl", XID: uint32(a.ID), Target: target, Alias: RightCommand}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	gs, err := r.Grants(ctx)
	if err != nil || len(gs) != 2 {
		t.Fatalf("grants after removal: %+v %v", gs, err)
	}
	for _, g := range gs {
		if g.Target == "dev1" {
			t.Fatalf("the new dev1 inherited %v", g)
		}
	}
	ev, _ := r.Events(ctx, EventFilter{Device: "dev1", Kind: EventDeviceRemoved})
	if len(ev) != 1 || ev[0].Detail != "1 grant(s) of the device removed with it" {
		t.Fatalf("removal event %+v", ev)
	}
}
