package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A join token enrols devices of its pattern with their own keys, once per use, until
// it expires or is revoked; every refusal says why and enrols nothing.
func TestJoinTokens(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	id, err := r.AddJoinToken(ctx, "hash-1", "batch 7", "default", "sensor-*", 2, time.Now().Add(time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddJoinToken(ctx, "hash-x", "", "nosuch", "a-*", 1, time.Now().Add(time.Hour), ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a token for an unknown profile: %v", err)
	}
	k1 := newKey(t)
	d, err := r.Join(ctx, "hash-1", "sensor-1", k1, "127.0.0.1:5")
	if err != nil || d.Name != "sensor-1" || len(d.Keys) != 1 {
		t.Fatalf("join: %+v %v", d, err)
	}
	refused := func(what, hash, name string, want string) {
		t.Helper()
		_, err := r.Join(ctx, hash, name, newKey(t), "127.0.0.1:5")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", what, err, want)
		}
		if _, err := r.Device(ctx, name); name != "sensor-1" && !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %s was enrolled all the same", what, name)
		}
	}
	refused("a name outside the pattern", "hash-1", "camera-1", "for names sensor-*")
	refused("a name taken", "hash-1", "sensor-1", "exists")
	refused("another hub's token", "hash-nope", "sensor-2", "not one of this hub's")
	if _, err := r.Join(ctx, "hash-1", "sensor-1b", k1, ""); !errors.Is(err, ErrExists) {
		t.Errorf("a key that is another device's: %v", err)
	}
	if _, err := r.Join(ctx, "hash-1", "sensor-2", newKey(t), ""); err != nil {
		t.Fatal(err)
	}
	refused("used up", "hash-1", "sensor-3", "used up")
	r.AddJoinToken(ctx, "hash-2", "", "default", "*", 5, time.Now().Add(time.Hour), "")
	r.AddJoinToken(ctx, "hash-3", "", "default", "*", 5, time.Now().Add(-time.Second), "")
	toks, _ := r.JoinTokens(ctx)
	if err := r.RevokeJoinToken(ctx, toks[1].ID); err != nil {
		t.Fatal(err)
	}
	refused("revoked", "hash-2", "x-1", "revoked")
	refused("expired", "hash-3", "x-2", "expired")
	// A token of manual approval: the device joins, and is refused until approved.
	r.AddJoinToken(ctx, "hash-4", "", "default", "door-*", 1, time.Now().Add(time.Hour), ApproveManual)
	if _, err := r.Join(ctx, "hash-4", "door-1", newKey(t), ""); err != nil {
		t.Fatal(err)
	}
	if d, _ := r.Device(ctx, "door-1"); d.RevokedAt == nil || !IsPending(d.RevokeWhy) {
		t.Fatalf("a device joined pending approval: %+v", d)
	}
	if err := r.ApproveDevice(ctx, "door-1"); err != nil {
		t.Fatal(err)
	}
	if d, _ := r.Device(ctx, "door-1"); d.RevokedAt != nil {
		t.Fatalf("an approved device: %+v", d)
	}
	if err := r.ApproveDevice(ctx, "door-1"); !errors.Is(err, ErrNotRevoked) {
		t.Fatalf("approving twice: %v", err)
	}
	toks, _ = r.JoinTokens(ctx)
	toks = toks[1:]
	if len(toks) != 3 || toks[2].ID != id || toks[2].Used != 2 || toks[2].UsesLeft != 0 || toks[1].RevokedAt == nil {
		t.Fatalf("tokens: %+v", toks)
	}
}
