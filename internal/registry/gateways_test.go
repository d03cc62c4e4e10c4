package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/iotsafe/iotsafe/internal/profile"
)

// A gateway's first announcement of a device enrols it, bound to the gateway, with a
// socket per alias of the devices' profile; another gateway cannot claim it, nor a
// direct device; a gateway stops at its device limit.
func TestClaimDevice(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if err := r.PutProfile(ctx, &profile.Profile{Name: "cam", Reverse: map[string]int{"http": 80, "rtsp": 554}}); err != nil {
		t.Fatal(err)
	}
	d, err := r.ClaimDevice(ctx, "cam1", "gw1", "cam", 2)
	if err != nil {
		t.Fatal(err)
	}
	if d.Via != "gw1" || d.Profile != "cam" || len(d.Sockets) != 2 || len(d.Keys) != 0 || !d.Address.IsValid() {
		t.Fatalf("claimed: %+v", d)
	}
	again, err := r.ClaimDevice(ctx, "cam1", "gw1", "cam", 2)
	if err != nil || again.Address != d.Address || again.Sockets[0] != d.Sockets[0] {
		t.Fatalf("announced again: %+v %v", again, err)
	}
	if _, err := r.ClaimDevice(ctx, "cam1", "gw2", "cam", 2); !errors.Is(err, ErrClaimed) {
		t.Fatalf("another gateway's claim: %v", err)
	}
	if _, err := r.AddDevice(ctx, "direct", "cam", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ClaimDevice(ctx, "direct", "gw1", "cam", 2); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a direct device claimed: %v", err)
	}
	if _, err := r.ClaimDevice(ctx, "cam2", "gw1", "cam", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ClaimDevice(ctx, "cam3", "gw1", "cam", 2); !errors.Is(err, ErrGatewayFull) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := r.ClaimDevice(ctx, "Bad", "gw1", "cam", 2); err == nil {
		t.Fatal("a bad name was claimed")
	}
	names, err := r.GatewayDevices(ctx, "gw1")
	if err != nil || len(names) != 2 || names[0] != "cam1" || names[1] != "cam2" {
		t.Fatalf("devices of gw1: %v %v", names, err)
	}
}
