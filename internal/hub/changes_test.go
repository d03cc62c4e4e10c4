package hub

import (
	"net/netip"
	"testing"
	"time"
)

// The admin kick that follows a change reports the sessions the change feed closed for
// it, once, and nothing for another device, key or reason.
func TestKickMemo(t *testing.T) {
	var k kickMemo
	k.put("dev1", "", "key revoked", 2)
	if n := k.take("dev1", "", "device removed"); n != 0 {
		t.Fatalf("another reason: %d", n)
	}
	if n := k.take("dev2", "", "key revoked"); n != 0 {
		t.Fatalf("another device: %d", n)
	}
	if n := k.take("dev1", "", "key revoked"); n != 2 {
		t.Fatalf("the same change: %d", n)
	}
	if n := k.take("dev1", "", "key revoked"); n != 0 {
		t.Fatalf("reported twice: %d", n)
	}
}

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
