package hub

import "testing"

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
