package registry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Login sessions: listed until they expire, refused for an unknown account, ended by a
// password change, by the operator and by removing the account, and kept across a
// reopen.
func TestLoginSessions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := open(t, dir)
	alice, _ := r.AddAccount(ctx, "alice", "$argon2id$fake")
	bob, _ := r.AddAccount(ctx, "bob", "$argon2id$fake")
	later := time.Now().Add(time.Hour)
	for _, s := range []LoginSession{
		{Hash: "a1", AccountID: alice.ID, ExpiresAt: later},
		{Hash: "a2", AccountID: alice.ID, ExpiresAt: time.Now().Add(-time.Second)},
		{Hash: "b1", AccountID: bob.ID, ExpiresAt: later},
	} {
		if err := r.AddLoginSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.AddLoginSession(ctx, LoginSession{Hash: "x", AccountID: 999, ExpiresAt: later}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("session of an unknown account: %v", err)
	}
	hashes := func() map[string]int64 {
		t.Helper()
		ss, err := r.LoginSessions(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, s := range ss {
			m[s.Hash] = s.AccountID
			if !s.ExpiresAt.After(time.Now()) {
				t.Errorf("expired session %s listed", s.Hash)
			}
		}
		return m
	}
	if got := hashes(); len(got) != 2 || got["a1"] != alice.ID || got["b1"] != bob.ID {
		t.Fatalf("sessions %v, want a1 (alice) and b1 (bob)", got)
	}

	r.Close()
	r = open(t, dir)
	if got := hashes(); len(got) != 2 {
		t.Fatalf("after reopening: %v", got)
	}
	if a, _ := r.Account(ctx, "alice"); a.Sessions != 1 {
		t.Fatalf("alice has %d open sessions, want 1 (one expired)", a.Sessions)
	}
	// The operator ends carol's sessions; nobody else's go.
	carol, _ := r.AddAccount(ctx, "carol", "")
	r.AddLoginSession(ctx, LoginSession{Hash: "c1", AccountID: carol.ID, ExpiresAt: later})
	if n, err := r.EndLoginSessions(ctx, "carol"); n != 1 || err != nil {
		t.Fatalf("ending carol's sessions: %d, %v", n, err)
	}
	if _, err := r.EndLoginSessions(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ending an unknown account's sessions: %v", err)
	}
	if got := hashes(); len(got) != 2 {
		t.Fatalf("after ending carol's: %v", got)
	}
	if err := r.SetPassword(ctx, "alice", "$argon2id$new"); err != nil {
		t.Fatal(err)
	}
	if got := hashes(); len(got) != 1 || got["b1"] != bob.ID {
		t.Fatalf("after alice's password change: %v, want only b1", got)
	}
	if err := r.RemoveLoginSession(ctx, "unknown"); err != nil {
		t.Fatalf("removing an unknown session: %v", err)
	}
	if err := r.RemoveAccount(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if got := hashes(); len(got) != 0 {
		t.Fatalf("after removing bob: %v", got)
	}
}
