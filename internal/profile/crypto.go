package profile

import (
	"fmt"
	"slices"

	"golang.org/x/crypto/ssh"
)

// CryptoPolicy is the SSH part of the paper's HostProfile: which algorithms the hub
// offers. Empty lists mean the modern defaults below. Names unknown to the SSH library
// are errors, and algorithms the library marks insecure need AllowInsecure.
type CryptoPolicy struct {
	KeyExchanges      []string `yaml:"kex" json:"kex"`
	Ciphers           []string `yaml:"ciphers" json:"ciphers"`
	MACs              []string `yaml:"macs" json:"macs"`
	HostKeyAlgorithms []string `yaml:"host_key_algorithms" json:"host_key_algorithms"`
	// DeviceKeyAlgorithms are the public-key signature algorithms accepted from devices.
	DeviceKeyAlgorithms []string `yaml:"device_key_algorithms" json:"device_key_algorithms"`
	// AllowInsecure permits naming, in the lists above, algorithms the SSH library lists as
	// insecure (ssh-rsa with SHA-1, CBC, diffie-hellman-group1...) and hmac-sha1. It
	// enables none by itself. The hub logs a warning per insecure algorithm in use.
	AllowInsecure bool `yaml:"allow_insecure" json:"allow_insecure"`
}

// Modern defaults: post-quantum hybrid and X25519 key exchange, AEAD ciphers, ed25519 host key.
// chacha20 comes before AES-GCM because Dropbear 2022.83 has no AES-GCM.
var (
	DefaultKeyExchanges = []string{"mlkem768x25519-sha256", "curve25519-sha256"}
	DefaultCiphers      = []string{"chacha20-poly1305@openssh.com", "aes256-gcm@openssh.com", "aes128-gcm@openssh.com"}
	// MACs matter only for non-AEAD ciphers, and none is offered by default; only the
	// encrypt-then-MAC variants are listed, so an operator who adds aes-ctr gets no
	// encrypt-and-MAC construction unless they name one (ssh-audit flags those).
	DefaultMACs                = []string{"hmac-sha2-256-etm@openssh.com", "hmac-sha2-512-etm@openssh.com"}
	DefaultHostKeyAlgorithms   = []string{ssh.KeyAlgoED25519}
	DefaultDeviceKeyAlgorithms = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512}
)

// ApplyDefaults fills empty lists with the modern defaults.
func (c *CryptoPolicy) ApplyDefaults() {
	fill := func(dst *[]string, def []string) {
		if len(*dst) == 0 {
			*dst = slices.Clone(def)
		}
	}
	fill(&c.KeyExchanges, DefaultKeyExchanges)
	fill(&c.Ciphers, DefaultCiphers)
	fill(&c.MACs, DefaultMACs)
	fill(&c.HostKeyAlgorithms, DefaultHostKeyAlgorithms)
	fill(&c.DeviceKeyAlgorithms, DefaultDeviceKeyAlgorithms)
}

// weakerThanLibrary are algorithms the SSH library supports but iotsafe treats as
// insecure: SHA-1 MACs (ssh-audit rates hmac-sha1 a failure).
var weakerThanLibrary = struct{ MACs []string }{MACs: []string{"hmac-sha1"}}

// Validate rejects unknown names and insecure ones unless AllowInsecure is set.
// AllowInsecure only permits naming them: it adds no algorithm to any list by itself.
// It returns the insecure algorithms in use so the caller can warn about them.
func (c *CryptoPolicy) Validate() (insecure []string, err error) {
	sup, bad := ssh.SupportedAlgorithms(), ssh.InsecureAlgorithms()
	bad.MACs = append(slices.Clone(bad.MACs), weakerThanLibrary.MACs...)
	check := func(field string, names, supported, weak []string) error {
		for _, n := range names {
			switch {
			case slices.Contains(weak, n): // before supported: hmac-sha1 is in both
				if !c.AllowInsecure {
					return fmt.Errorf("ssh.%s: %q is insecure; set ssh.allow_insecure to use it", field, n)
				}
				insecure = append(insecure, n)
			case slices.Contains(supported, n):
			default:
				return fmt.Errorf("ssh.%s: %q is not an algorithm this hub supports (supported: %v)", field, n, supported)
			}
		}
		return nil
	}
	for _, f := range []struct {
		name            string
		val, sup, insec []string
	}{
		{"kex", c.KeyExchanges, sup.KeyExchanges, bad.KeyExchanges},
		{"ciphers", c.Ciphers, sup.Ciphers, bad.Ciphers},
		{"macs", c.MACs, sup.MACs, bad.MACs},
		{"host_key_algorithms", c.HostKeyAlgorithms, sup.HostKeys, bad.HostKeys},
		{"device_key_algorithms", c.DeviceKeyAlgorithms, sup.PublicKeyAuths, bad.PublicKeyAuths},
	} {
		if err := check(f.name, f.val, f.sup, f.insec); err != nil {
			return nil, err
		}
	}
	return insecure, nil
}
