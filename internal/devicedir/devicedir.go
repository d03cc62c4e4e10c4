package devicedir

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/netip"
	"sort"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// Source is the part of the registry the directory reads.
type Source interface {
	DeviceStates(ctx context.Context) ([]registry.DeviceState, error)
	DeviceSecretHashes(ctx context.Context) (map[string]string, error)
	DeviceCertSerials(ctx context.Context) (map[string]string, error)
	SOAPKeys(ctx context.Context) (map[string]registry.SOAPKey, error)
}

// Directory holds the current snapshot. It is safe for concurrent use.
type Directory struct {
	src  Source
	snap atomic.Pointer[Snapshot]
}

// New is an empty directory over src; Reload fills it.
func New(src Source) *Directory {
	d := &Directory{src: src}
	d.snap.Store(&Snapshot{devices: map[string]registry.DeviceState{}, byAddr: map[netip.Addr]string{}, secrets: map[string]string{}, certs: map[string]string{}, soapKeys: map[string]registry.SOAPKey{}})
	return d
}

// Reload reads the registry and replaces the snapshot; on error the old one stays.
func (d *Directory) Reload(ctx context.Context) error {
	states, err := d.src.DeviceStates(ctx)
	if err != nil {
		return err
	}
	secrets, err := d.src.DeviceSecretHashes(ctx)
	if err != nil {
		return err
	}
	certs, err := d.src.DeviceCertSerials(ctx)
	if err != nil {
		return err
	}
	soapKeys, err := d.src.SOAPKeys(ctx)
	if err != nil {
		return err
	}
	s := &Snapshot{devices: make(map[string]registry.DeviceState, len(states)), byAddr: make(map[netip.Addr]string, len(states)),
		secrets: secrets, certs: certs, soapKeys: soapKeys, names: make([]string, 0, len(states)), Loaded: time.Now()}
	for _, st := range states {
		s.devices[st.Name] = st
		s.byAddr[st.Address] = st.Name
		s.names = append(s.names, st.Name)
	}
	sort.Strings(s.names)
	d.snap.Store(s)
	return nil
}

// Load is the current snapshot; it never changes (Reload replaces it).
func (d *Directory) Load() *Snapshot { return d.snap.Load() }

// Snapshot is the directory at one moment.
type Snapshot struct {
	devices map[string]registry.DeviceState
	byAddr  map[netip.Addr]string
	secrets map[string]string // device -> hex SHA-256 of its secret
	certs   map[string]string // device -> serial number of its current client certificate
	// soapKeys: key id -> a device's pre-shared SOAP key
	soapKeys map[string]registry.SOAPKey
	names    []string // sorted
	// Loaded is when it was read.
	Loaded time.Time
}

// Device is a device's state.
func (s *Snapshot) Device(name string) (registry.DeviceState, bool) {
	st, ok := s.devices[name]
	return st, ok
}

// SecretStamp names the generation of a device's telemetry secret by its stored hash
// (hex SHA-256): a digest, never the hash itself; "" when the device has no secret.
// Tokens carry it, so a new secret ends the tokens issued under the old one.
func SecretStamp(hash string) string {
	if hash == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(hash))
	return hex.EncodeToString(sum[:8])
}

// Cred is the device's credential generation (SecretStamp of its current secret).
func (s *Snapshot) Cred(name string) string { return SecretStamp(s.secrets[name]) }

// CurrentCert reports whether serial (decimal) is the device's current client
// certificate: the last one issued; an older one, or one the registry has no record of,
// is not.
func (s *Snapshot) CurrentCert(name, serial string) bool {
	cur, ok := s.certs[name]
	return ok && subtle.ConstantTimeCompare([]byte(cur), []byte(serial)) == 1
}

// SOAPKey finds a SOAP key by id, with its device's state (check Revoked).
func (s *Snapshot) SOAPKey(id string) (registry.SOAPKey, registry.DeviceState, bool) {
	k, ok := s.soapKeys[id]
	if !ok {
		return registry.SOAPKey{}, registry.DeviceState{}, false
	}
	st, ok := s.devices[k.Device]
	return k, st, ok
}

// ByAddress is the device whose pool address ip is (the source of its direct forwards:
// how a device that comes over its SSH session is known without a credential).
func (s *Snapshot) ByAddress(ip netip.Addr) (registry.DeviceState, bool) {
	name, ok := s.byAddr[ip.Unmap()]
	if !ok {
		return registry.DeviceState{}, false
	}
	return s.Device(name)
}

// Names are every device's name, sorted (do not modify).
func (s *Snapshot) Names() []string { return s.names }

// SecretResult is what CheckSecret found.
type SecretResult int

const (
	// NoSecret: no device of that name has a telemetry secret (the name may be an
	// account's).
	NoSecret SecretResult = iota
	// WrongSecret: the device has a secret and this is not it.
	WrongSecret
	// SecretOK: the secret is the device's (check the state's Revoked too).
	SecretOK
)

// CheckSecret compares secret with the device's stored hash in constant time.
func (s *Snapshot) CheckSecret(name, secret string) (registry.DeviceState, SecretResult) {
	want, ok := s.secrets[name]
	if !ok {
		return registry.DeviceState{}, NoSecret
	}
	sum := sha256.Sum256([]byte(secret))
	got := hex.EncodeToString(sum[:])
	st, live := s.devices[name]
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 || !live {
		return registry.DeviceState{}, WrongSecret
	}
	return st, SecretOK
}
