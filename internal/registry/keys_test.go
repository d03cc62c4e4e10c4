package registry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Key rotation: a second key works beside the first, the first is revoked alone, the
// last active key cannot be revoked, keys are never shared, and a revoked device takes
// no new key.
func TestKeyRotation(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	old, next := newKey(t), newKey(t)
	if _, err := r.AddDevice(ctx, "dev1", "default", old); err != nil {
		t.Fatal(err)
	}
	other := newKey(t)
	if _, err := r.AddDevice(ctx, "dev2", "default", other); err != nil {
		t.Fatal(err)
	}
	if err := r.AddKey(ctx, "dev1", next); err != nil {
		t.Fatal(err)
	}
	if err := r.AddKey(ctx, "dev1", other); !errors.Is(err, ErrExists) {
		t.Fatalf("dev2's key added to dev1: %v", err)
	}
	if err := r.AddKey(ctx, "nodev", newKey(t)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key for an unknown device: %v", err)
	}
	usable := func(k ssh.PublicKey) bool {
		t.Helper()
		d, revoked, err := r.DeviceByKey(ctx, k)
		if err != nil || d.Name != "dev1" {
			t.Fatalf("lookup: %v %v", d, err)
		}
		return !revoked
	}
	if !usable(old) || !usable(next) {
		t.Fatal("both keys should work during the rotation")
	}
	if err := r.RevokeKey(ctx, "dev1", ssh.FingerprintSHA256(old)); err != nil {
		t.Fatal(err)
	}
	if usable(old) || !usable(next) {
		t.Fatal("after revoking the old key: the old one must be refused, the new one accepted")
	}
	if err := r.RevokeKey(ctx, "dev1", ssh.FingerprintSHA256(old)); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}
	if err := r.RevokeKey(ctx, "dev1", ssh.FingerprintSHA256(next)); !errors.Is(err, ErrLastKey) {
		t.Fatalf("revoking the last active key: %v", err)
	}
	if err := r.RevokeKey(ctx, "dev1", ssh.FingerprintSHA256(other)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoking another device's key: %v", err)
	}
	d, _ := r.Device(ctx, "dev1")
	if len(d.Keys) != 2 || d.Keys[0].RevokedAt == nil || d.Keys[1].RevokedAt != nil {
		t.Fatalf("keys %+v", d.Keys)
	}
	if err := r.RevokeDevice(ctx, "dev2", "test"); err != nil {
		t.Fatal(err)
	}
	if d, revoked, err := r.DeviceByKey(ctx, other); err != nil || d.Name != "dev2" || !revoked || d.RevokeWhy != "test" {
		t.Fatalf("the active key of a revoked device: %+v revoked %v, %v", d, revoked, err)
	}
	if _, _, err := r.DeviceByKey(ctx, newKey(t)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown key: %v", err)
	}
	if err := r.AddKey(ctx, "dev2", newKey(t)); err == nil {
		t.Fatal("a revoked device took a new key")
	}
}

// Reinstating a revoked device lets the keys revoked with it log in again, not a key
// revoked on its own before; its violations start again at 0; a device that is not
// revoked has nothing to undo.
func TestReinstateDevice(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	old, cur := newKey(t), newKey(t)
	if _, err := r.AddDevice(ctx, "dev1", "default", old); err != nil {
		t.Fatal(err)
	}
	if err := r.AddKey(ctx, "dev1", cur); err != nil {
		t.Fatal(err)
	}
	if err := r.RevokeKey(ctx, "dev1", ssh.FingerprintSHA256(old)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddViolations(ctx, "dev1", 5); err != nil {
		t.Fatal(err)
	}
	if err := r.ReinstateDevice(ctx, "dev1"); !errors.Is(err, ErrNotRevoked) {
		t.Fatalf("reinstating a device that is not revoked: %v", err)
	}
	if err := r.RevokeDevice(ctx, "dev1", "by mistake"); err != nil {
		t.Fatal(err)
	}
	if err := r.ReinstateDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		key    ssh.PublicKey
		usable bool
	}{{cur, true}, {old, false}} {
		if _, revoked, err := r.DeviceByKey(ctx, k.key); err != nil || revoked == k.usable {
			t.Errorf("key %s after the reinstatement: revoked=%v %v, want usable=%v", ssh.FingerprintSHA256(k.key), revoked, err, k.usable)
		}
	}
	d, err := r.Device(ctx, "dev1")
	if err != nil || d.Revoked() || d.RevokeWhy != "" || d.Violations != 0 {
		t.Fatalf("the device after the reinstatement: %+v %v", d, err)
	}
	evs, err := r.Events(ctx, EventFilter{Device: "dev1", Kind: EventReinstated})
	if err != nil || len(evs) != 1 || !strings.Contains(evs[0].Detail, "1 key(s)") || !strings.Contains(evs[0].Detail, "5 violation(s)") {
		t.Fatalf("the audit log: %+v %v", evs, err)
	}
	if err := r.ReinstateDevice(ctx, "nosuch"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reinstating an unknown device: %v", err)
	}
}
