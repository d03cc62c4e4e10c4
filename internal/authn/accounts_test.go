package authn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// accountsOn opens a real SQLite registry with account alice (password "correct horse
// battery") and one API token, and the accounts over it.
func accountsOn(t *testing.T, limits AccountLimits) (*Accounts, *registry.Registry, string) {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.88.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	hash, err := credential.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.AddAccount(ctx, "alice", hash); err != nil {
		t.Fatal(err)
	}
	tok, tokHash, err := credential.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.AddToken(ctx, "alice", "laptop", tokHash, nil); err != nil {
		t.Fatal(err)
	}
	a, err := NewAccounts(ctx, reg, limits)
	if err != nil {
		t.Fatal(err)
	}
	return a, reg, tok
}

func TestAccountPasswordTokenAndLimits(t *testing.T) {
	ctx := context.Background()
	a, _, tok := accountsOn(t, AccountLimits{MaxFailedLogins: 3})
	p, err := a.Password(ctx, "192.0.2.1", "alice", "correct horse battery")
	if err != nil || p.Name != "alice" || p.ID == 0 {
		t.Fatalf("right password: %+v %v", p, err)
	}
	if n, ok := a.Name(p.ID); !ok || n != "alice" {
		t.Fatalf("Name(%d) = %q %v", p.ID, n, ok)
	}
	if p, err := a.Token("192.0.2.1", tok); err != nil || p.Name != "alice" {
		t.Fatalf("token: %+v %v", p, err)
	}
	// Unknown names and wrong passwords get the same answer.
	if _, err := a.Password(ctx, "192.0.2.9", "mallory", "x"); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("unknown account: %v", err)
	}
	// Three failures lock the account for every address (guessing from many addresses
	// gains nothing), but never a valid token.
	for range 3 {
		if _, err := a.Password(ctx, "192.0.2.2", "alice", "wrong"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
	}
	if _, err := a.Password(ctx, "192.0.2.2", "alice", "correct horse battery"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("after 3 failures: %v", err)
	}
	if _, err := a.Password(ctx, "192.0.2.3", "alice", "correct horse battery"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("another address: %v", err)
	}
	if _, err := a.Token("192.0.2.2", tok); err != nil {
		t.Fatalf("a valid token after password failures: %v", err)
	}
	// An address sending bad tokens is told to slow down.
	for range 3 {
		a.Token("192.0.2.4", "not-a-token")
	}
	if _, err := a.Token("192.0.2.4", "not-a-token"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("after 3 bad tokens: %v", err)
	}
	// The log never keeps what was typed as a name unless it is an account.
	if got := a.LogName("alice"); got != "alice" {
		t.Fatalf("LogName(alice) = %q", got)
	}
	if got := a.LogName("hunter2"); got == "hunter2" || got[:8] != "unknown:" {
		t.Fatalf("LogName(hunter2) = %q", got)
	}
}

func TestAccountChangesStopAtReload(t *testing.T) {
	ctx := context.Background()
	a, reg, tok := accountsOn(t, AccountLimits{})
	p, err := a.Password(ctx, "192.0.2.1", "alice", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	cookie, err := a.NewSession(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := a.Session(cookie); !ok || s.Name != "alice" {
		t.Fatalf("session: %+v %v", s, ok)
	}
	// Sessions are in the registry: new accounts over it (a restarted hub) know them.
	b, err := NewAccounts(ctx, reg, AccountLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Session(cookie); !ok {
		t.Fatal("session lost across a restart")
	}
	if _, ok := b.Session(cookie + "x"); ok {
		t.Fatal("a made-up cookie accepted")
	}
	// Logout ends it in memory and in the registry.
	if err := b.EndSession(ctx, cookie); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Session(cookie); ok {
		t.Fatal("session alive after logout elsewhere and a reload")
	}
	// A new password changes the account's stamp at the next reload (what MQTT compares
	// to disconnect a client that logged in with the old one); the stamp is not the hash.
	if st, ok := a.Stamp(p.ID); !ok || st != p.Stamp || st == "" {
		t.Fatalf("stamp %q %v, login said %q", st, ok, p.Stamp)
	}
	hash, err := credential.HashPassword("a new password entirely")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.SetPassword(ctx, "alice", hash); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if st, ok := a.Stamp(p.ID); !ok || st == p.Stamp || strings.Contains(hash, st) {
		t.Fatalf("stamp after a new password: %q %v", st, ok)
	}
	// A removed account: its token and name stop at the next reload.
	if err := reg.RemoveAccount(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Token("192.0.2.1", tok); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("token of a removed account: %v", err)
	}
	if _, ok := a.Name(p.ID); ok {
		t.Fatal("removed account still named")
	}
	if _, ok := a.Stamp(p.ID); ok {
		t.Fatal("removed account still stamped")
	}
}

func TestAccountLimitsDefaults(t *testing.T) {
	var l AccountLimits
	l.applyDefaults()
	if l.MaxFailedLogins != 10 || l.LoginWindow != 5*time.Minute || l.SessionTTL != 12*time.Hour {
		t.Fatalf("defaults %+v", l)
	}
}

// Two hubs over one registry: a session one starts is good at the other at once (it
// asks the registry for a cookie it does not hold), and a logout at one is a change
// event that makes the other forget it at its next reload.
func TestSessionsAcrossHubsOfOneRegistry(t *testing.T) {
	ctx := context.Background()
	hubA, reg, _ := accountsOn(t, AccountLimits{})
	hubB, err := NewAccounts(ctx, reg, AccountLimits{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := hubA.Password(ctx, "127.0.0.1", "alice", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	cookie, err := hubA.NewSession(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if who, ok := hubB.Session(cookie); !ok || who.Name != "alice" {
		t.Fatalf("hub B does not know hub A's session: %+v %v", who, ok)
	}
	if _, ok := hubB.Session(cookie + "x"); ok {
		t.Fatal("an unknown cookie was taken")
	}
	if err := hubA.EndSession(ctx, cookie); err != nil {
		t.Fatal(err)
	}
	if evs, _ := reg.Events(ctx, registry.EventFilter{Kind: registry.EventLoginSessionEnded}); len(evs) != 1 || !strings.Contains(evs[0].Detail, "alice") {
		t.Fatalf("the logout's change event: %+v", evs)
	}
	if err := hubB.Reload(ctx); err != nil { // what the change feed makes hub B do
		t.Fatal(err)
	}
	if _, ok := hubB.Session(cookie); ok {
		t.Fatal("hub B still takes a session that ended at hub A")
	}
}
