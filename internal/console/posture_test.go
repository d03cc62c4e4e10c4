package console

import (
	"encoding/json"
	"testing"

	"github.com/iotsafe/iotsafe/internal/kexinit"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// The dry run: a client that offers only the dropped algorithm loses its session; one
// that offers another the hub keeps negotiates that; MACs do not matter under an AEAD
// cipher; devices whose offer is unknown are counted apart; dropping what the hub does
// not offer changes nothing.
func TestDryRunPlan(t *testing.T) {
	pol := profile.CryptoPolicy{}
	pol.ApplyDefaults()
	pol.Ciphers = append(pol.Ciphers, "aes128-ctr")
	groupOf := func(a registry.Algorithms, n int) (registry.AlgoGroup, registry.Algorithms) {
		b, _ := json.Marshal(a)
		return registry.AlgoGroup{Algos: string(b), Devices: n}, a
	}
	offers := map[string]*kexinit.Offer{
		"only-x25519": {Kex: []string{"curve25519-sha256", "ext-info-c"}, CiphersC2S: []string{"aes128-ctr"}, MACsC2S: []string{"hmac-sha2-256-etm@openssh.com"}},
		"modern":      {Kex: []string{"mlkem768x25519-sha256", "curve25519-sha256"}, CiphersC2S: []string{"aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"}},
	}
	var groups []registry.AlgoGroup
	var algos []registry.Algorithms
	for _, x := range []struct {
		a registry.Algorithms
		n int
	}{
		{registry.Algorithms{KeyExchange: "curve25519-sha256", Cipher: "aes128-ctr", MAC: "hmac-sha2-256-etm@openssh.com", Offer: "only-x25519"}, 2},
		{registry.Algorithms{KeyExchange: "mlkem768x25519-sha256", Cipher: "aes256-gcm@openssh.com", Offer: "modern"}, 5},
		{registry.Algorithms{KeyExchange: "curve25519-sha256", Cipher: "aes256-gcm@openssh.com"}, 1}, // offer not recorded
	} {
		g, a := groupOf(x.a, x.n)
		groups, algos = append(groups, g), append(algos, a)
	}
	run, lose := plan(pol, catKex, "curve25519-sha256", groups, algos, offers)
	if run.LoseTotal != 2 || len(lose) != 1 || lose[0] != groups[0].Algos || run.Kept != 5 || run.Unknown != 1 {
		t.Fatalf("dropping curve25519-sha256: %+v", run)
	}
	run, _ = plan(pol, catCipher, "aes256-gcm@openssh.com", groups, algos, offers)
	if run.LoseTotal != 0 || len(run.Change) != 1 || run.Change[0].K != "chacha20-poly1305@openssh.com" || run.Change[0].V != 5 || run.Kept != 2 {
		t.Fatalf("dropping aes256-gcm: %+v", run)
	}
	run, _ = plan(pol, catMAC, "hmac-sha2-256-etm@openssh.com", groups, algos, offers)
	if run.LoseTotal != 2 || run.Kept != 6 {
		t.Fatalf("dropping the MAC only the CTR devices use: %+v", run)
	}
	if run, _ = plan(pol, catKex, "diffie-hellman-group14-sha256", groups, algos, offers); !run.NotOffered {
		t.Fatalf("dropping what the hub does not offer: %+v", run)
	}
}
