package hub

import (
	"strings"
	"time"

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
	for _, c := range set.Certificates {
		until := "forever"
		if c.ValidBefore != ssh.CertTimeInfinity {
			t := time.Unix(int64(min(c.ValidBefore, 1<<62)), 0).UTC()
			until = t.Format(time.RFC3339)
			if time.Now().After(t) {
				h.log.Warn("the host certificate expired: devices that trust the hub by its CA refuse it; sign the host key again (iotsafe ca sign-host) and restart",
					"event", "hostcert_expired", "key", ssh.FingerprintSHA256(c.Key), "expired", until)
				continue
			}
		}
		h.log.Info("host certificate presented beside the host key", "event", "hostcert", "key", ssh.FingerprintSHA256(c.Key),
			"ca", ssh.FingerprintSHA256(c.SignatureKey), "principals", strings.Join(c.ValidPrincipals, ","), "until", until)
	}
}
