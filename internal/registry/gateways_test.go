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
	claim := func(gateway string, names ...string) []Claimed {
		t.Helper()
		var cs []Claim
		for _, n := range names {
			cs = append(cs, Claim{Name: n, Aliases: []string{"http"}, Remote: "10.0.0.9:4000", Algos: Algorithms{Client: "SSH-2.0-x", Key: "SHA256:k"}})
		}
		out, err := r.ClaimDevices(ctx, gateway, "cam", 2, cs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	one := func(gateway, name string) (*Device, error) {
		t.Helper()
		c := claim(gateway, name)[0]
		return c.Device, c.Err
	}
	d, err := one("gw1", "cam1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Via != "gw1" || d.Profile != "cam" || len(d.Sockets) != 2 || len(d.Keys) != 0 || !d.Address.IsValid() {
		t.Fatalf("claimed: %+v", d)
	}
	again, err := one("gw1", "cam1")
	if err != nil || again.Address != d.Address || again.Sockets[0] != d.Sockets[0] {
		t.Fatalf("announced again: %+v %v", again, err)
	}
	if _, err := one("gw2", "cam1"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("another gateway's claim: %v", err)
	}
	if _, err := r.AddDevice(ctx, "direct", "cam", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := one("gw1", "direct"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a direct device claimed: %v", err)
	}
	// One batch: a new device within the limit, one beyond it, a bad name; each
	// answered on its own.
	batch := claim("gw1", "cam2", "cam3", "Bad")
	if batch[0].Err != nil || !errors.Is(batch[1].Err, ErrGatewayFull) || batch[2].Err == nil {
		t.Fatalf("batch: %+v", batch)
	}
	got, err := r.Device(ctx, "cam2")
	if err != nil || got.LastAlgos == nil || got.LastAlgos.Client != "SSH-2.0-x" || got.LastRemote != "10.0.0.9:4000" {
		t.Fatalf("cam2's session was not recorded: %+v %v", got, err)
	}
	if err := r.RevokeDevice(ctx, "cam2", "test"); err != nil {
		t.Fatal(err)
	}
	if d, err := one("gw1", "cam2"); err != nil || !d.Revoked() {
		t.Fatalf("a revoked device: %+v %v", d, err)
	}
	if err := r.EndSessions(ctx, []string{"cam1", "cam2"}, "gw1"); err != nil {
		t.Fatal(err)
	}
	if ev, err := r.Events(ctx, EventFilter{Device: "cam1", Kind: EventSessionClose}); err != nil || len(ev) != 1 {
		t.Fatalf("session_close of cam1: %v %v", ev, err)
	}
	names, err := r.GatewayDevices(ctx, "gw1")
	if err != nil || len(names) != 2 || names[0] != "cam1" || names[1] != "cam2" {
		t.Fatalf("devices of gw1: %v %v", names, err)
	}
}

// A device a gateway relays notifications of is recorded as an announcement would, but
// no session is: relaying says nothing of one. Created tells the first claim.
func TestClaimRelayedDeviceRecordsNoSession(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if err := r.PutProfile(ctx, &profile.Profile{Name: "cam", Reverse: map[string]int{"http": 80}}); err != nil {
		t.Fatal(err)
	}
	for i, wantCreated := range []bool{true, false} {
		out, err := r.ClaimDevices(ctx, "gw1", "cam", 5, []Claim{{Name: "cam1", Relayed: true}})
		if err != nil || out[0].Err != nil || out[0].Created != wantCreated || out[0].Device.Via != "gw1" {
			t.Fatalf("claim %d: %+v %v", i, out, err)
		}
	}
	d, err := r.Device(ctx, "cam1")
	if err != nil || d.LastSeen != nil || len(d.Sockets) != 1 {
		t.Fatalf("a relayed device's record: %+v %v", d, err)
	}
	evs, err := r.Events(ctx, EventFilter{Device: "cam1", Kind: EventSessionOpen})
	if err != nil || len(evs) != 0 {
		t.Fatalf("session events of a relayed device: %+v %v", evs, err)
	}
}
