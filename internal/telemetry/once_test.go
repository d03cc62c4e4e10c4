package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An append under a Once key stores once: the same key again is a duplicate (nothing
// stored, readers see one notification), also after the store is reopened (a hub's
// restart); once the key expired and retention ran, the key may be used again.
func TestAppendOnce(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir, Config{})
	now := time.Now()
	key := Once{Key: "soap\x00k1\x00urn:uuid:1", Until: now.Add(10 * time.Minute)}
	if _, err := s.AppendOnce(ctx, key, note("dev1", "first")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AppendOnce(ctx, key, note("dev1", "again")); !errors.Is(err, ErrDuplicate) || got != nil {
		t.Fatalf("the same key again: %v %v", got, err)
	}
	// Other keys and plain appends in the same batches are not affected.
	if _, err := s.AppendOnce(ctx, Once{Key: "other", Until: key.Until}, note("dev1", "other")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir, Config{})
	if _, err := s.AppendOnce(ctx, key, note("dev1", "after restart")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("after a restart: %v", err)
	}
	list, err := s.List(ctx, Filter{Devices: []string{"dev1"}})
	if err != nil || len(list) != 2 {
		t.Fatalf("stored %d notifications (%v), want first and other", len(list), err)
	}
	if _, err := s.PruneAge(ctx, now.Add(11*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendOnce(ctx, Once{Key: key.Key, Until: now.Add(20 * time.Minute)}, note("dev1", "later")); err != nil {
		t.Fatalf("an expired key: %v", err)
	}
}

// Hubs sharing a PostgreSQL store accept a key once between them.
func TestAppendOnceAcrossHubs(t *testing.T) {
	pgOnly(t)
	dir := t.TempDir()
	a, b := open(t, dir, Config{}), open(t, dir, Config{})
	ctx := context.Background()
	key := Once{Key: "soap\x00k1\x00urn:uuid:2", Until: time.Now().Add(time.Minute)}
	if _, err := a.AppendOnce(ctx, key, note("dev1", "at a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendOnce(ctx, key, note("dev1", "at b")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("the same key at another hub: %v", err)
	}
}
