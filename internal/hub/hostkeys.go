package hub

import (
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hostkey"
)

// ReloadHostKeys reads the next and retired host keys again, after 'iotsafe hostkey add'
// or 'drop', and has the SSH server announce a new next key to live sessions. The
// signing keys stay those the hub started with: a promotion needs the hub stopped.
func (h *Hub) ReloadHostKeys() error {
	set, err := hostkey.Load(h.dir, h.cfg.SSH.Crypto.HostKeyAlgorithms)
	if err != nil {
		return err
	}
	set.Signing = h.hostKeys
	h.hostKeySet.Store(set)
	h.logRotation(set)
	h.ssh.SetHostKeys(set)
	return nil
}

// NextHostKeys are the host keys announced to devices but not yet signing handshakes.
func (h *Hub) NextHostKeys() []ssh.PublicKey {
	return h.hostKeySet.Load().NextKeys()
}

func (h *Hub) logRotation(set *hostkey.Set) {
	fps := func(keys []ssh.PublicKey) string {
		var s []string
		for _, k := range keys {
			s = append(s, ssh.FingerprintSHA256(k))
		}
		return strings.Join(s, " ")
	}
	if next := set.NextKeys(); len(next) > 0 {
		h.log.Info("host key rotation: next keys announced to devices; promote them once devices learned them (iotsafe hostkey list)", "event", "hostkey_next", "next", fps(next))
	}
	if len(set.Retired) > 0 {
		h.log.Info("host key rotation: devices not yet told are told the retired keys are gone", "event", "hostkey_retired", "retired", fps(set.Retired))
	}
}
