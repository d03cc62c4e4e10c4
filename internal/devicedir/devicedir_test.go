package devicedir

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// The directory over a real registry: devices by name and pool address, secrets checked,
// and a revocation or removal seen at the next reload, not before (a snapshot).
func TestDirectoryFollowsTheRegistry(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.81.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	reg.PutProfile(ctx, &profile.Profile{Name: "p", Reverse: map[string]int{"http": 80}})
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	key, _ := ssh.NewPublicKey(pub)
	dev, err := reg.AddDevice(ctx, "dev1", "p", key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("s3cret"))
	if err := reg.SetDeviceSecret(ctx, "dev1", hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
	d := New(reg)
	if _, ok := d.Load().Device("dev1"); ok {
		t.Fatal("an empty directory knows dev1 before its first reload")
	}
	if err := d.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	s := d.Load()
	if st, ok := s.ByAddress(dev.Address); !ok || st.Name != "dev1" || st.Revoked {
		t.Fatalf("by address %v: %+v %v", dev.Address, st, ok)
	}
	if _, res := s.CheckSecret("dev1", "s3cret"); res != SecretOK {
		t.Fatalf("right secret: %v", res)
	}
	if _, res := s.CheckSecret("dev1", "s3creT"); res != WrongSecret {
		t.Fatalf("wrong secret: %v", res)
	}
	if _, res := s.CheckSecret("alice", "x"); res != NoSecret {
		t.Fatalf("a name without a secret: %v", res)
	}
	if err := reg.RevokeDevice(ctx, "dev1", "lost"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Device("dev1"); st.Revoked {
		t.Fatal("a snapshot changed under its reader")
	}
	d.Reload(ctx)
	if st, _ := d.Load().Device("dev1"); !st.Revoked {
		t.Fatal("the revocation is not in the reloaded directory")
	}
	reg.RemoveDevice(ctx, "dev1")
	d.Reload(ctx)
	if _, ok := d.Load().Device("dev1"); ok || len(d.Load().Names()) != 0 {
		t.Fatal("a removed device is still in the directory")
	}
}
