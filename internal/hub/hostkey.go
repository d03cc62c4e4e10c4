package hub

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
)

// hostKeyFiles maps each key type to its file in the data folder and a generator.
var hostKeyFiles = []struct {
	file   string
	needs  func(algos []string) bool
	create func() (crypto.Signer, error)
}{
	{"host_ed25519_key", func(a []string) bool { return slices.Contains(a, ssh.KeyAlgoED25519) }, func() (crypto.Signer, error) {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}},
	{"host_ecdsa_key", func(a []string) bool {
		return slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "ecdsa-") })
	},
		func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }},
	{"host_rsa_key", func(a []string) bool {
		return slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "rsa-") || s == ssh.KeyAlgoRSA })
	},
		func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 3072) }},
}

// LoadHostKeys loads, creating on first start (mode 0600), the host keys the policy needs.
func LoadHostKeys(dir string, algos []string) ([]ssh.Signer, error) {
	var out []ssh.Signer
	for _, hk := range hostKeyFiles {
		if !hk.needs(algos) {
			continue
		}
		s, err := loadOrCreateKey(filepath.Join(dir, hk.file), hk.create)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("hub: ssh.host_key_algorithms names no key type this hub can create")
	}
	return out, nil
}

// LoadOrCreateKey reads an OpenSSH private key, creating an ed25519 one if missing.
func LoadOrCreateKey(path string) (ssh.Signer, error) {
	return loadOrCreateKey(path, hostKeyFiles[0].create)
}

func loadOrCreateKey(path string, create func() (crypto.Signer, error)) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err := create()
		if err != nil {
			return nil, fmt.Errorf("hub: generate %s: %w", path, err)
		}
		if err := WritePrivateKey(path, k, ""); err != nil {
			return nil, err
		}
		return ssh.NewSignerFromSigner(k)
	}
	if err != nil {
		return nil, fmt.Errorf("hub: read key: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("hub: key %s has mode %v: it must not be readable by group or others (chmod 600)", path, fi.Mode().Perm())
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("hub: parse key %s: %w", path, err)
	}
	return s, nil
}

// WritePrivateKey writes k in OpenSSH format with mode 0600 (created exclusively, so an
// existing key is never overwritten).
func WritePrivateKey(path string, k crypto.Signer, comment string) error {
	blk, err := ssh.MarshalPrivateKey(k, comment)
	if err != nil {
		return fmt.Errorf("hub: marshal key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("hub: create key: %w", err)
	}
	if _, err := f.Write(pem.EncodeToMemory(blk)); err != nil {
		f.Close()
		return fmt.Errorf("hub: write key: %w", err)
	}
	return f.Close()
}
