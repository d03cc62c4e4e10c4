package authn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
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

// KeyStore keeps the key set (its JSON): a file in the data folder (FileKeys), or a
// row of the registry when it is in PostgreSQL, so every hub of the registry signs and
// verifies with the same keys and a token from one hub works at all of them.
type KeyStore interface {
	// Read returns the set, or an error wrapping os.ErrNotExist when there is none.
	Read(ctx context.Context) ([]byte, error)
	// Create stores b when there is no set yet, or fails wrapping os.ErrExist.
	Create(ctx context.Context, b []byte) error
	// Update replaces the set with what fn makes of it, atomically against other
	// writers.
	Update(ctx context.Context, fn func(old []byte) ([]byte, error)) error
	// Where names the store in messages.
	Where() string
}

// FileKeys is the key set in DIR/jwt-keys.json (mode 0600; a file readable by others is
// refused).
type FileKeys string

// Where implements KeyStore.
func (d FileKeys) Where() string { return filepath.Join(string(d), KeysFile) }

// Read implements KeyStore.
func (d FileKeys) Read(context.Context) ([]byte, error) {
	path := d.Where()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v; it holds the token signing keys (chmod 600 %s)", ErrUnsafeKeyFile, path, fi.Mode().Perm(), path)
	}
	return os.ReadFile(path)
}

// Create implements KeyStore.
func (d FileKeys) Create(_ context.Context, b []byte) error { return writeKeys(string(d), b, true) }

// Update implements KeyStore. Within one data folder only one hub runs, and rotations
// are an operator's command: the file is not locked against a concurrent one.
func (d FileKeys) Update(ctx context.Context, fn func([]byte) ([]byte, error)) error {
	old, err := d.Read(ctx)
	if err != nil {
		return err
	}
	b, err := fn(old)
	if err != nil {
		return err
	}
	return writeKeys(string(d), b, false)
}

// LoadKeys reads DIR/jwt-keys.json.
func LoadKeys(dir string) (*KeySet, error) { return loadKeys(context.Background(), FileKeys(dir)) }

func loadKeys(ctx context.Context, store KeyStore) (*KeySet, error) {
	b, err := store.Read(ctx)
	if err != nil {
		return nil, err
	}
	return parseKeys(b, store.Where())
}

func parseKeys(b []byte, where string) (*KeySet, error) {
	var ks KeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("authn: %s: %w", where, err)
	}
	if len(ks.Keys) == 0 {
		return nil, fmt.Errorf("authn: %s holds no key", where)
	}
	for _, k := range ks.Keys {
		if n, ok := keyBytes[k.Alg]; !ok || len(k.Secret) < n || k.ID == "" {
			return nil, fmt.Errorf("authn: %s: key %q (%s) is malformed or too short", where, k.ID, k.Alg)
		}
	}
	return &ks, nil
}

// loadOrCreateKeys reads the key set, creating it with one alg key if there is none.
// A set whose current key has another algorithm is left alone: Rotate changes it.
func loadOrCreateKeys(ctx context.Context, store KeyStore, alg string) (*KeySet, bool, error) {
	ks, err := loadKeys(ctx, store)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return ks, false, err
	}
	k, err := newKey(alg, time.Now())
	if err != nil {
		return nil, false, err
	}
	ks = &KeySet{Keys: []Key{k}}
	b, err := json.MarshalIndent(ks, "", "  ")
	if err != nil {
		return nil, false, err
	}
	if err := store.Create(ctx, b); err != nil {
		if errors.Is(err, os.ErrExist) { // another process (or hub) created it first
			ks, err = loadKeys(ctx, store)
			return ks, false, err
		}
		return nil, false, err
	}
	return ks, true, nil
}

// Rotate adds a new current key of alg to DIR's key file (RotateIn).
func Rotate(dir, alg string, maxTTL time.Duration) (*Key, error) {
	return RotateIn(context.Background(), FileKeys(dir), alg, maxTTL)
}

// RotateIn adds a new current key of alg; the previous ones are retired (they keep
// verifying for the longest token lifetime) and keys retired longer ago than maxTTL are
// dropped. An unsigned key (none) is dropped at once: once another key signs, a token
// anyone could have forged must not verify any more.
func RotateIn(ctx context.Context, store KeyStore, alg string, maxTTL time.Duration) (*Key, error) {
	return rotate(ctx, store, alg, maxTTL, false)
}

// RetireNow adds a new current key of alg and drops every other key at once: the tokens
// they signed stop verifying (a leaked key). Devices and accounts log in again.
func RetireNow(ctx context.Context, store KeyStore, alg string) (*Key, error) {
	return rotate(ctx, store, alg, 0, true)
}

func rotate(ctx context.Context, store KeyStore, alg string, maxTTL time.Duration, dropAll bool) (*Key, error) {
	if _, _, err := loadOrCreateKeys(ctx, store, alg); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	k, err := newKey(alg, now)
	if err != nil {
		return nil, err
	}
	err = store.Update(ctx, func(old []byte) ([]byte, error) {
		ks, err := parseKeys(old, store.Where())
		if err != nil {
			return nil, err
		}
		kept := ks.Keys[:0]
		for _, o := range ks.Keys {
			if o.Retired == nil {
				o.Retired = &now
			}
			if !dropAll && o.Alg != None && now.Sub(*o.Retired) <= maxTTL {
				kept = append(kept, o)
			}
		}
		ks.Keys = append(kept, k)
		return json.MarshalIndent(ks, "", "  ")
	})
	if err != nil {
		return nil, err
	}
	return &k, nil
}

// writeKeys writes b 0600 through a temporary file, so a reader never sees half a file:
// renamed over the old one, or linked only if there is none (createOnly).
func writeKeys(dir string, b []byte, createOnly bool) error {
	return atomicfile.Write(filepath.Join(dir, KeysFile), b, atomicfile.Options{CreateOnly: createOnly})
}
