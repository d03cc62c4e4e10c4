package registry

import (
	"context"
	"fmt"
	"testing"
)

// The console's fleet pages: filtered by state, name, profile, gateway and group within
// the caller's scope, sorted, paged, with the total; and the counts at a glance.
func TestFleetPagesAndCounts(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	for i := range 12 {
		groups := []string{}
		if i%2 == 0 {
			groups = append(groups, "network:plant-a")
		}
		if _, err := r.AddDevice(ctx, fmt.Sprintf("dev%02d", i), "default", newKey(t), groups...); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r.SetHub("hub-a")
	must(r.OpenSession(ctx, "dev01", "127.0.0.1:1", Algorithms{Cipher: "aes128-gcm@openssh.com"}, ""))
	must(r.OpenSession(ctx, "dev02", "127.0.0.1:2", Algorithms{}, ""))
	must(r.RevokeDevice(ctx, "dev03", "stolen"))
	must(r.RevokeDevice(ctx, "dev04", PendingReason+" (join token 1)"))

	page := func(q FleetQuery) FleetPage {
		t.Helper()
		p, err := r.FleetDevices(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := Scope{All: true}
	if p := page(FleetQuery{Scope: all, Limit: 5}); p.Total != 12 || len(p.Devices) != 5 || p.Devices[0].Name != "dev00" {
		t.Fatalf("first page: %d %v", p.Total, names(p.Devices))
	}
	if p := page(FleetQuery{Scope: all, Limit: 5, Offset: 10}); len(p.Devices) != 2 || p.Devices[1].Name != "dev11" {
		t.Fatalf("last page: %v", names(p.Devices))
	}
	for _, c := range []struct {
		state string
		want  int
	}{{StateOnline, 2}, {StateRevoked, 1}, {StatePending, 1}, {StateOffline, 8}} {
		if p := page(FleetQuery{Scope: all, State: c.state}); p.Total != c.want {
			t.Errorf("%s: %d, want %d", c.state, p.Total, c.want)
		}
	}
	if p := page(FleetQuery{Scope: all, Pattern: "1"}); p.Total != 3 { // dev01, dev10, dev11
		t.Errorf("name pattern: %v", names(p.Devices))
	}
	if p := page(FleetQuery{Scope: all, Pattern: "_"}); p.Total != 0 {
		t.Errorf("a LIKE wildcard in the pattern is a character: %v", names(p.Devices))
	}
	if p := page(FleetQuery{Scope: all, Group: "network:plant-a"}); p.Total != 6 {
		t.Errorf("group: %d", p.Total)
	}
	if p := page(FleetQuery{Scope: all, Hub: "hub-a"}); p.Total != 2 {
		t.Errorf("hub: %d", p.Total)
	}
	if p := page(FleetQuery{Scope: all, Sort: "last_seen", Limit: 2}); len(p.Devices) != 2 || p.Devices[0].LastSeen == nil || p.Devices[1].LastSeen == nil {
		t.Errorf("by last seen, those seen first: %v", names(p.Devices))
	}
	// A scope: dev05 by name, plant-a by group.
	scoped := Scope{Names: []string{"dev05"}, Groups: []string{"network:plant-a"}}
	if p := page(FleetQuery{Scope: scoped}); p.Total != 7 {
		t.Errorf("scoped: %d %v", p.Total, names(p.Devices))
	}
	if p := page(FleetQuery{Scope: Scope{}}); p.Total != 0 {
		t.Errorf("an empty scope sees %d", p.Total)
	}
	if _, err := r.FleetDevices(ctx, FleetQuery{Scope: all, State: "nonsense"}); err == nil {
		t.Error("an unknown state was taken")
	}
	c, err := r.Fleet(ctx, all)
	if err != nil || c.Devices != 12 || c.Online != 2 || c.Revoked != 1 || c.Pending != 1 || c.Offline != 8 || c.ByHub["hub-a"] != 2 {
		t.Fatalf("counts: %+v %v", c, err)
	}
	if c, _ := r.Fleet(ctx, Scope{Names: []string{"dev01", "dev03"}}); c.Devices != 2 || c.Online != 1 || c.Revoked != 1 {
		t.Fatalf("scoped counts: %+v", c)
	}
}

func names(ds []*Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return out
}

// Online devices grouped by what they negotiated and offered, and named by group; the
// offers kept once per hash.
func TestOnlineAlgorithmsAndOffers(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	r.SetHub("hub-a")
	for i := range 5 {
		name := fmt.Sprintf("dev%d", i)
		if _, err := r.AddDevice(ctx, name, "default", newKey(t)); err != nil {
			t.Fatal(err)
		}
		offer := "aaaa"
		if i == 4 {
			offer = "bbbb"
		}
		if err := r.OpenSession(ctx, name, "127.0.0.1:1", Algorithms{KeyExchange: "curve25519-sha256", Offer: offer}, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []string{"aaaa", "aaaa", "bbbb"} {
		if err := r.RecordOffer(ctx, h, `{"kex":["`+h+`"]}`); err != nil {
			t.Fatal(err)
		}
	}
	groups, err := r.OnlineAlgorithms(ctx, Scope{All: true})
	if err != nil || len(groups) != 2 || groups[0].Devices != 4 || groups[1].Devices != 1 {
		t.Fatalf("groups: %+v %v", groups, err)
	}
	names, err := r.OnlineWithAlgorithms(ctx, Scope{All: true}, []string{groups[1].Algos}, 10)
	if err != nil || len(names) != 1 || names[0] != "dev4" {
		t.Fatalf("the second group's devices: %v %v", names, err)
	}
	if names, _ := r.OnlineWithAlgorithms(ctx, Scope{Names: []string{"dev0"}}, []string{groups[0].Algos}, 10); len(names) != 1 {
		t.Fatalf("scoped: %v", names)
	}
	offers, err := r.Offers(ctx, []string{"aaaa", "bbbb", "cccc"})
	if err != nil || len(offers) != 2 || offers["bbbb"] != `{"kex":["bbbb"]}` {
		t.Fatalf("offers: %v %v", offers, err)
	}
}
