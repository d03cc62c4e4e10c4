package hostkey

import (
	"bytes"
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
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/fileowner"
)

// Suffixes of a kind's files beside its signing key.
const (
	nextSuffix    = ".next"
	retiredSuffix = ".retired.pub"
)

// kind is one type of host key: its file in the data folder, whether a policy's host
// key algorithms need it, and how to make one.
type kind struct {
	name   string // as operators type it: ed25519, ecdsa, rsa
	file   string
	keyAlg string // the key's type on the wire (ssh.PublicKey.Type)
	needs  func(algos []string) bool
	create func() (crypto.Signer, error)
}

var kinds = []kind{
	{"ed25519", "host_ed25519_key", ssh.KeyAlgoED25519, func(a []string) bool { return slices.Contains(a, ssh.KeyAlgoED25519) }, func() (crypto.Signer, error) {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}},
	{"ecdsa", "host_ecdsa_key", ssh.KeyAlgoECDSA256, func(a []string) bool {
		return slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "ecdsa-") })
	}, func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }},
	{"rsa", "host_rsa_key", ssh.KeyAlgoRSA, func(a []string) bool {
		return slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "rsa-") || s == ssh.KeyAlgoRSA })
	}, func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 3072) }},
}

// Kinds are the names of the key types, for help and errors.
func Kinds() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.name
	}
	return out
}

func kindNamed(name string) (kind, error) {
	for _, k := range kinds {
		if k.name == name {
			return k, nil
		}
	}
	return kind{}, fmt.Errorf("hostkey: no key type %q (want one of %s)", name, strings.Join(Kinds(), ", "))
}

// Set is the host keys a hub serves with.
type Set struct {
	// Signing keys sign handshakes.
	Signing []ssh.Signer
	// Next keys are announced to devices and proven on request, never used in a
	// handshake until promoted.
	Next []ssh.Signer
	// Retired are the public parts of keys a promotion replaced. While there are any,
	// the hub announces its keys to devices that were not yet told, so their
	// known_hosts drop the retired key.
	Retired []ssh.PublicKey
	// Certificates are OpenSSH host certificates of signing keys (KEYFILE-cert.pub
	// beside the key, as sshd's HostCertificate), presented beside the plain keys.
	Certificates []*ssh.Certificate
}

// CertSuffix names a host key's certificate beside it, as OpenSSH does.
const CertSuffix = "-cert.pub"

// Load reads the host keys of the types the policy's algorithms need, creating a
// missing signing key (mode 0600), and the next and retired keys of those types.
func Load(dir string, algos []string) (*Set, error) {
	set := &Set{}
	for _, k := range kinds {
		if !k.needs(algos) {
			continue
		}
		s, err := loadOrCreate(filepath.Join(dir, k.file), k.create)
		if err != nil {
			return nil, err
		}
		set.Signing = append(set.Signing, s)
		cert, err := loadCertificate(filepath.Join(dir, k.file+CertSuffix), s.PublicKey())
		switch {
		case err == nil:
			set.Certificates = append(set.Certificates, cert)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		next, err := loadPrivate(filepath.Join(dir, k.file+nextSuffix))
		switch {
		case err == nil:
			set.Next = append(set.Next, next)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		old, err := loadPublic(filepath.Join(dir, k.file+retiredSuffix))
		switch {
		case err == nil:
			set.Retired = append(set.Retired, old)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	if len(set.Signing) == 0 {
		return nil, errors.New("hub: ssh.host_key_algorithms names no key type this hub can create")
	}
	return set, nil
}

// loadCertificate reads a host certificate of key.
func loadCertificate(path string, key ssh.PublicKey) (*ssh.Certificate, error) {
	pub, err := loadPublic(path)
	if err != nil {
		return nil, err
	}
	cert, ok := pub.(*ssh.Certificate)
	switch {
	case !ok:
		return nil, fmt.Errorf("hostkey: %s is a key, not a certificate", path)
	case cert.CertType != ssh.HostCert:
		return nil, fmt.Errorf("hostkey: %s is a user certificate, not a host certificate (ssh-keygen -h, or 'iotsafe ca sign-host')", path)
	case !bytes.Equal(cert.Key.Marshal(), key.Marshal()):
		return nil, fmt.Errorf("hostkey: %s certifies another key than %s: sign this hub's key again ('iotsafe ca sign-host')", path, strings.TrimSuffix(path, CertSuffix))
	}
	return cert, nil
}

// Announced are the keys the hub tells devices about: signing, then next.
func (s *Set) Announced() []ssh.PublicKey { return publicKeys(slices.Concat(s.Signing, s.Next)) }

// NextKeys are the public parts of the next keys.
func (s *Set) NextKeys() []ssh.PublicKey { return publicKeys(s.Next) }

func publicKeys(signers []ssh.Signer) []ssh.PublicKey {
	var out []ssh.PublicKey
	for _, k := range signers {
		out = append(out, k.PublicKey())
	}
	return out
}

// Rotating reports whether devices have something to learn: a next key to add, or a
// retired key to drop.
func (s *Set) Rotating() bool { return len(s.Next) > 0 || len(s.Retired) > 0 }

// Entry is one host key file, for 'iotsafe hostkey list'.
type Entry struct {
	Kind        string        `json:"kind"`
	State       string        `json:"state"` // signing, next or retired
	Fingerprint string        `json:"fingerprint"`
	File        string        `json:"file"`
	Since       time.Time     `json:"since"` // when the file was written
	Key         ssh.PublicKey `json:"-"`
}

// List reads every host key file in dir, of every type, without creating any.
func List(dir string) ([]Entry, error) {
	var out []Entry
	for _, k := range kinds {
		for _, f := range []struct {
			state, file string
			public      bool
		}{{"signing", k.file, false}, {"next", k.file + nextSuffix, false}, {"retired", k.file + retiredSuffix, true}} {
			path := filepath.Join(dir, f.file)
			var pub ssh.PublicKey
			var err error
			if f.public {
				pub, err = loadPublic(path)
			} else {
				var s ssh.Signer
				if s, err = loadPrivate(path); err == nil {
					pub = s.PublicKey()
				}
			}
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			fi, err := os.Stat(path)
			if err != nil {
				return nil, fmt.Errorf("hostkey: %w", err)
			}
			out = append(out, Entry{Kind: k.name, State: f.state, Fingerprint: ssh.FingerprintSHA256(pub), File: f.file, Since: fi.ModTime().UTC(), Key: pub})
		}
	}
	return out, nil
}

// AddNext creates the next key of a type (mode 0600, the data folder's owner). A next
// key of that type must not exist already. The type's retired key, if any, is
// forgotten: the new rotation's announcements leave it out as well.
func AddNext(dir, kindName string) (ssh.PublicKey, error) {
	k, err := kindNamed(kindName)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, k.file)); err != nil {
		return nil, fmt.Errorf("hostkey: the hub has no %s signing key to rotate (%s): start the hub once with ssh.host_key_algorithms naming %s", k.name, k.file, k.keyAlg)
	}
	path := filepath.Join(dir, k.file+nextSuffix)
	if s, err := loadPrivate(path); err == nil {
		return nil, fmt.Errorf("hostkey: a next %s key already exists (%s): promote it or drop it first", k.name, ssh.FingerprintSHA256(s.PublicKey()))
	}
	priv, err := k.create()
	if err != nil {
		return nil, fmt.Errorf("hostkey: generate: %w", err)
	}
	if err := WritePrivateKey(path, priv, ""); err != nil {
		return nil, err
	}
	if err := giveToOwner(dir, path); err != nil {
		os.Remove(path)
		return nil, err
	}
	if err := os.Remove(filepath.Join(dir, k.file+retiredSuffix)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hostkey: %w", err)
	}
	s, err := ssh.NewSignerFromSigner(priv)
	if err != nil {
		return nil, err
	}
	return s.PublicKey(), syncDir(dir)
}

// DropNext deletes the next key of a type, ending that rotation before its promotion.
func DropNext(dir, kindName string) (ssh.PublicKey, error) {
	k, err := kindNamed(kindName)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, k.file+nextSuffix)
	s, err := loadPrivate(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hostkey: there is no next %s key to drop", k.name)
	}
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("hostkey: %w", err)
	}
	return s.PublicKey(), syncDir(dir)
}

// Promotion is one signing key replaced by its next key.
type Promotion struct {
	Kind    string        `json:"kind"`
	Retired ssh.PublicKey `json:"-"`
	Signing ssh.PublicKey `json:"-"`
}

// Promote makes every next key its type's signing key. The replaced key's private part
// is deleted; its public part is kept as the type's retired key. The hub must be
// stopped (the caller holds the data folder's lock): a running hub keeps the keys it
// loaded.
func Promote(dir string) ([]Promotion, error) {
	var out []Promotion
	for _, k := range kinds {
		nextPath := filepath.Join(dir, k.file+nextSuffix)
		next, err := loadPrivate(nextPath)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, err
		}
		cur, err := loadPrivate(filepath.Join(dir, k.file))
		if err != nil {
			return out, err
		}
		retired := filepath.Join(dir, k.file+retiredSuffix)
		tmp := retired + ".tmp"
		if err := os.WriteFile(tmp, ssh.MarshalAuthorizedKey(cur.PublicKey()), 0o644); err != nil {
			return out, fmt.Errorf("hostkey: %w", err)
		}
		if err := giveToOwner(dir, tmp); err != nil {
			return out, err
		}
		if err := os.Rename(tmp, retired); err != nil {
			return out, fmt.Errorf("hostkey: %w", err)
		}
		// One rename replaces the signing key: a crash leaves the old or the new one.
		if err := os.Rename(nextPath, filepath.Join(dir, k.file)); err != nil {
			return out, fmt.Errorf("hostkey: %w", err)
		}
		// The old key's certificate goes with it; the next key's, if it was signed
		// ahead ('iotsafe ca sign-host' signs next keys too), takes its place.
		certPath := filepath.Join(dir, k.file+CertSuffix)
		if err := os.Rename(nextPath+CertSuffix, certPath); errors.Is(err, fs.ErrNotExist) {
			if err := os.Remove(certPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return out, fmt.Errorf("hostkey: %w", err)
			}
		} else if err != nil {
			return out, fmt.Errorf("hostkey: %w", err)
		}
		out = append(out, Promotion{Kind: k.name, Retired: cur.PublicKey(), Signing: next.PublicKey()})
	}
	if len(out) == 0 {
		return nil, errors.New("hostkey: there is no next key to promote: add one first (iotsafe hostkey add), and let devices learn it")
	}
	return out, syncDir(dir)
}

// LoadOrCreateKey reads an OpenSSH private key, creating an ed25519 one if missing.
func LoadOrCreateKey(path string) (ssh.Signer, error) {
	return loadOrCreate(path, kinds[0].create)
}

func loadOrCreate(path string, create func() (crypto.Signer, error)) (ssh.Signer, error) {
	s, err := loadPrivate(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	k, err := create()
	if err != nil {
		return nil, fmt.Errorf("hub: generate %s: %w", path, err)
	}
	if err := WritePrivateKey(path, k, ""); err != nil {
		return nil, err
	}
	return ssh.NewSignerFromSigner(k)
}

// loadPrivate reads an OpenSSH private key that only its owner may read.
func loadPrivate(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
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

func loadPublic(path string) (ssh.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("hostkey: %w", err)
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, fmt.Errorf("hostkey: parse %s: %w", path, err)
	}
	return k, nil
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
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("hub: write key: %w", err)
	}
	return f.Close()
}

func giveToOwner(dir, path string) error {
	own, err := fileowner.Of(dir)
	if err != nil {
		return err
	}
	return own.Chown(path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("hostkey: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("hostkey: %w", err)
	}
	return nil
}

// LoadPrivateKey reads an OpenSSH private key that only its owner may read.
func LoadPrivateKey(path string) (ssh.Signer, error) { return loadPrivate(path) }
