package registry

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/iotsafe/iotsafe/internal/sockets"
)

// The shared token keys: created once (a second hub creating them at the same time
// learns it lost and reads the winner's), updated under the writer lock, moved out.
func TestSharedSecret(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := openAt(t, location(t, dir), sockets.Config{})
	other := openAt(t, location(t, dir), sockets.Config{})
	s := r.SharedSecret(KeyJWT)
	if _, err := s.Read(ctx); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read before any: %v", err)
	}
	if err := s.Create(ctx, []byte(`{"keys":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := other.SharedSecret(KeyJWT).Create(ctx, []byte(`{"keys":2}`)); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second create: %v, want ErrExist", err)
	}
	if got, err := other.SharedSecret(KeyJWT).Read(ctx); err != nil || string(got) != `{"keys":1}` {
		t.Fatalf("the other handle reads %s, %v", got, err)
	}
	if err := other.SharedSecret(KeyJWT).Update(ctx, func(old []byte) ([]byte, error) { return append(old, '!'), nil }); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Read(ctx); string(got) != `{"keys":1}!` {
		t.Fatalf("after update: %s", got)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(b []byte) ([]byte, error) { return b, nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("update of a deleted secret: %v", err)
	}
}
