package hub

import (
	"net/netip"
	"testing"
	"time"
)

// An address no peer serves is remembered for a second, and the memory is bounded.
func TestMissCache(t *testing.T) {
	var mc missCache
	a := netip.MustParseAddrPort("127.78.0.1:10000")
	if mc.recent(a) {
		t.Fatal("remembered before it was added")
	}
	mc.add(a)
	if !mc.recent(a) {
		t.Fatal("forgotten at once")
	}
	mc.m[a] = time.Now().Add(-2 * missFor)
	if mc.recent(a) {
		t.Fatal("remembered past its second")
	}
	for i := range missMost + 1 {
		mc.add(netip.AddrPortFrom(a.Addr(), uint16(i)))
	}
	if len(mc.m) > missMost {
		t.Fatalf("%d entries, bound %d", len(mc.m), missMost)
	}
}
