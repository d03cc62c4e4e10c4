package sockets

import (
	"errors"
	"net/netip"
	"testing"
)

func TestNextAddressSkipsTakenAndEdges(t *testing.T) {
	p, err := NewPool(Config{CIDR: "127.77.0.0/30"})
	if err != nil {
		t.Fatal(err)
	}
	taken := map[netip.Addr]bool{}
	var got []string
	for {
		a, err := p.NextAddress(func(a netip.Addr) bool { return taken[a] })
		if errors.Is(err, ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		taken[a] = true
		got = append(got, a.String())
	}
	want := []string{"127.77.0.1", "127.77.0.2"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestIPv6Pool(t *testing.T) {
	p, err := NewPool(Config{CIDR: "fd77::/64"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.NextAddress(func(netip.Addr) bool { return false })
	if err != nil || a.String() != "fd77::1" {
		t.Fatalf("got %v %v", a, err)
	}
	if !p.Contains(a) || p.Contains(netip.MustParseAddr("fd78::1")) {
		t.Fatal("Contains is wrong")
	}
}

func TestNextPort(t *testing.T) {
	p, _ := NewPool(Config{PortBase: 20000})
	port, err := p.NextPort(func(n int) bool { return n == 20000 })
	if err != nil || port != 20001 {
		t.Fatalf("got %d %v", port, err)
	}
	if _, err := p.NextPort(func(int) bool { return true }); !errors.Is(err, ErrExhausted) {
		t.Fatalf("want ErrExhausted, got %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{{CIDR: "nonsense"}, {CIDR: "127.0.0.1/32"}, {PortBase: 80}, {PortBase: 70000},
		// Ranges that hold the host's own addresses or leave loopback (audit findings).
		{CIDR: "127.0.0.0/8"}, {CIDR: "0.0.0.0/0"}, {CIDR: "10.99.0.0/16"}, {CIDR: "127.0.0.0/16"}, {CIDR: "127.0.0.0/12"},
		{CIDR: "::/0"}, {CIDR: "::1/128"}, {CIDR: "2001:db8::/64"}, {CIDR: "fd00::/8"}, {CIDR: "::ffff:127.77.0.0/112"}} {
		if _, err := NewPool(c); err == nil {
			t.Errorf("%+v: want error", c)
		}
	}
}

func TestPoolHoldingAHostAddressRefused(t *testing.T) {
	// Every Linux host has 127.0.0.1 on lo; the range check alone would also refuse this
	// prefix, so call the interface check directly.
	if err := checkHostAddresses(netip.MustParsePrefix("127.0.0.0/24")); err == nil {
		t.Fatal("a pool holding 127.0.0.1, assigned to lo, was accepted")
	}
	if err := checkHostAddresses(netip.MustParsePrefix(DefaultCIDR)); err != nil {
		t.Fatalf("the default pool: %v", err)
	}
}

// NextAddressFrom continues after the last allocation and wraps around to free
// addresses before it; it never hands out the network or last address.
func TestNextAddressFrom(t *testing.T) {
	p, err := NewPool(Config{CIDR: "127.78.0.0/30"}) // usable: .1 and .2
	if err != nil {
		t.Fatal(err)
	}
	taken := map[netip.Addr]bool{}
	isTaken := func(a netip.Addr) bool { return taken[a] }
	one, two := netip.MustParseAddr("127.78.0.1"), netip.MustParseAddr("127.78.0.2")
	if a, err := p.NextAddressFrom(two, isTaken); err != nil || a != two {
		t.Fatalf("from .2: %v %v", a, err)
	}
	taken[two] = true
	if a, err := p.NextAddressFrom(netip.MustParseAddr("127.78.0.3"), isTaken); err != nil || a != one {
		t.Fatalf("wrapping to .1: %v %v", a, err)
	}
	taken[one] = true
	if _, err := p.NextAddressFrom(one, isTaken); err == nil {
		t.Fatal("a full pool gave an address")
	}
	if a, err := p.NextAddressFrom(netip.MustParseAddr("10.0.0.1"), func(netip.Addr) bool { return false }); err != nil || a != one {
		t.Fatalf("a hint outside the pool: %v %v", a, err)
	}
}
