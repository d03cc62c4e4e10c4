package authn

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// KeysFile holds the signing keys inside the data folder (mode 0600).
const KeysFile = "jwt-keys.json"

// Algorithms.
const (
	HS256 = "HS256"
	HS384 = "HS384"
	HS512 = "HS512"
	// None is unsigned: only with Config.AllowUnsigned, for measuring (paper 004's baseline).
	None = "none"
)

// keyBytes is the secret size per algorithm: twice the hash's output, as RFC 7518
// requires at least its output and the paper used 64 and 128 bytes.
var keyBytes = map[string]int{HS256: 64, HS384: 128, HS512: 128, None: 0}

// ValidAlgorithm reports whether alg is one the hub signs with.
func ValidAlgorithm(alg string) bool { _, ok := keyBytes[alg]; return ok }

// Key is one signing key.
type Key struct {
	ID      string     `json:"kid"`
	Alg     string     `json:"alg"`
	Secret  []byte     `json:"secret"` // base64 in the file
	Created time.Time  `json:"created"`
	Retired *time.Time `json:"retired,omitempty"` // set when a newer key replaced it
}

// KeySet is the file's content: the newest key signs, the others still verify until
// their tokens can no longer be valid.
type KeySet struct {
	Keys []Key `json:"keys"`

	indexOnce sync.Once
	index     compactIndex // header segment -> key, for verifyCompact
}

// Current is the signing key.
func (ks *KeySet) Current() *Key { return &ks.Keys[len(ks.Keys)-1] }

// byID finds a key that may still verify at now: the current one, or a retired one
// whose longest-lived token (maxTTL) may not have expired yet.
func (ks *KeySet) byID(id string, now time.Time, maxTTL time.Duration) *Key {
	for i := range ks.Keys {
		k := &ks.Keys[i]
		if k.ID != id {
			continue
		}
		if k.Retired != nil && now.After(k.Retired.Add(maxTTL)) {
			return nil
		}
		return k
	}
	return nil
}

func newKey(alg string, now time.Time) (Key, error) {
	n, ok := keyBytes[alg]
	if !ok {
		return Key{}, fmt.Errorf("authn: algorithm %q: want HS256, HS384, HS512 (or none with allow_unsigned)", alg)
	}
	id := make([]byte, 8)
	secret := make([]byte, n)
	if _, err := rand.Read(id); err != nil {
		return Key{}, err
	}
	if _, err := rand.Read(secret); err != nil {
		return Key{}, err
	}
	return Key{ID: hex.EncodeToString(id), Alg: alg, Secret: secret, Created: now.UTC()}, nil
}

// ErrUnsafeKeyFile means the key file is readable by others than its owner.
var ErrUnsafeKeyFile = errors.New("authn: unsafe key file mode")

// LoadKeys reads DIR/jwt-keys.json.
func LoadKeys(dir string) (*KeySet, error) {
	path := filepath.Join(dir, KeysFile)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v; it holds the token signing keys (chmod 600 %s)", ErrUnsafeKeyFile, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ks KeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("authn: %s: %w", path, err)
	}
	if len(ks.Keys) == 0 {
		return nil, fmt.Errorf("authn: %s holds no key", path)
	}
	for _, k := range ks.Keys {
		if n, ok := keyBytes[k.Alg]; !ok || len(k.Secret) < n || k.ID == "" {
			return nil, fmt.Errorf("authn: %s: key %q (%s) is malformed or too short", path, k.ID, k.Alg)
		}
	}
	return &ks, nil
}

// LoadOrCreateKeys reads the key file, creating it with one alg key if there is none.
// A file whose current key has another algorithm is left alone: Rotate changes it.
func LoadOrCreateKeys(dir, alg string) (*KeySet, bool, error) {
	ks, err := LoadKeys(dir)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return ks, false, err
	}
	k, err := newKey(alg, time.Now())
	if err != nil {
		return nil, false, err
	}
	ks = &KeySet{Keys: []Key{k}}
	if err := writeKeys(dir, ks, true); err != nil {
		if errors.Is(err, os.ErrExist) { // another process created it first
			ks, err = LoadKeys(dir)
			return ks, false, err
		}
		return nil, false, err
	}
	return ks, true, nil
}

// Rotate adds a new current key of alg; the previous ones are retired (they keep
// verifying for the longest token lifetime) and keys retired longer ago than maxTTL are
// dropped.
func Rotate(dir, alg string, maxTTL time.Duration) (*Key, error) {
	ks, _, err := LoadOrCreateKeys(dir, alg)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	k, err := newKey(alg, now)
	if err != nil {
		return nil, err
	}
	kept := ks.Keys[:0]
	for _, old := range ks.Keys {
		if old.Retired == nil {
			old.Retired = &now
		}
		if now.Sub(*old.Retired) <= maxTTL {
			kept = append(kept, old)
		}
	}
	ks.Keys = append(kept, k)
	if err := writeKeys(dir, ks, false); err != nil {
		return nil, err
	}
	return &k, nil
}

// writeKeys writes the set 0600 through a temporary file, so a reader never sees half a
// file: renamed over the old one, or linked only if there is none (createOnly).
func writeKeys(dir string, ks *KeySet, createOnly bool) error {
	b, err := json.MarshalIndent(ks, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".jwt-keys-*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	path := filepath.Join(dir, KeysFile)
	if createOnly {
		return os.Link(tmp.Name(), path)
	}
	return os.Rename(tmp.Name(), path)
}
