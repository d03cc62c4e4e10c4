package tls13conn

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"hash"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// suite is a TLS 1.3 cipher suite: its hash (for the key schedule) and its AEAD.
type suite struct {
	hash   func() hash.Hash
	keyLen int
	aead   func(key []byte) (cipher.AEAD, error)
}

func aesGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// suites are the three TLS 1.3 suites crypto/tls negotiates.
var suites = map[uint16]suite{
	tls.TLS_AES_128_GCM_SHA256:       {sha256.New, 16, aesGCM},
	tls.TLS_AES_256_GCM_SHA384:       {sha512.New384, 32, aesGCM},
	tls.TLS_CHACHA20_POLY1305_SHA256: {sha256.New, chacha20poly1305.KeySize, chacha20poly1305.New},
}

// expandLabel is HKDF-Expand-Label (RFC 8446 section 7.1) with an empty context.
func expandLabel(h func() hash.Hash, secret []byte, label string, length int) []byte {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0) // no context
	out, err := hkdf.Expand(h, secret, string(info), length)
	if err != nil {
		panic("tls13conn: HKDF-Expand-Label: " + err.Error()) // only for lengths no suite has
	}
	return out
}

// tagLen is the authentication tag of every TLS 1.3 AEAD.
const tagLen = 16

// idleGap: a connection with no record either way for this long drops its AEADs'
// state (a KiB each for AES-GCM: key schedule and tables); the next record builds it
// again from the key, a microsecond. A device that sends a keepalive a minute holds
// none between them; one that sends often keeps them.
const idleGap = 5 * time.Second

// direction is one way's record protection: its key and nonce, the next record's
// sequence number, and the traffic secret the next key update derives from.
type direction struct {
	s      suite
	key    []byte
	aead   atomic.Pointer[sealer] // nil while idle; cipher builds it
	iv     [12]byte
	seq    uint64
	secret []byte
}

// sealer holds an AEAD (atomic.Pointer wants a pointer).
type sealer struct{ cipher.AEAD }

// cipher is the direction's AEAD, built from the key if it was dropped.
func (d *direction) cipher() (cipher.AEAD, error) {
	if a := d.aead.Load(); a != nil {
		return a.AEAD, nil
	}
	a, err := d.s.aead(d.key)
	if err != nil {
		return nil, err
	}
	d.aead.Store(&sealer{a})
	return a, nil
}

// newDirection derives a direction's key and IV from a traffic secret (RFC 8446
// section 7.3).
func newDirection(s suite, secret []byte) (*direction, error) {
	d := &direction{s: s}
	if err := d.setSecret(secret); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *direction) setSecret(secret []byte) error {
	key := expandLabel(d.s.hash, secret, "key", d.s.keyLen)
	aead, err := d.s.aead(key)
	if err != nil {
		return err
	}
	if aead.NonceSize() != len(d.iv) || aead.Overhead() != tagLen {
		return fmt.Errorf("tls13conn: a %d-byte nonce and a %d-byte tag", aead.NonceSize(), aead.Overhead())
	}
	d.aead.Store(&sealer{aead})
	d.key, d.secret, d.seq = key, secret, 0
	copy(d.iv[:], expandLabel(d.s.hash, secret, "iv", len(d.iv)))
	return nil
}

// update moves to the next traffic secret (a KeyUpdate, RFC 8446 section 7.2).
func (d *direction) update() error {
	return d.setSecret(expandLabel(d.s.hash, d.secret, "traffic upd", d.s.hash().Size()))
}

// nonce is the per-record nonce: the IV with the sequence number XORed into its end.
func (d *direction) nonce() [12]byte {
	n := d.iv
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], d.seq)
	for i, b := range seq {
		n[4+i] ^= b
	}
	return n
}
