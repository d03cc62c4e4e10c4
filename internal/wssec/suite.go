package wssec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rc4" // the lab row of paper 001 only: the hub never accepts it
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"
	"sort"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
)

// Suite is one pairing of a cipher with a digest and MAC: what --alg names. The modern
// suites use an AEAD with HMAC-SHA256 signatures and SHA-256 digests; the paper's use
// AES-128-CBC (or RC4) with HMAC-SHA1 and SHA-1 digests.
type Suite struct {
	Name   string
	Legacy bool // the paper's: accepted by the hub only when the operator opts in
	// LabOnly suites (RC4) exist to reproduce the paper's tables; the hub never accepts them.
	LabOnly bool
	// XMLEnc is the cipher's XML-Encryption algorithm URI, "" when XML-Encryption has
	// none (ChaCha20-Poly1305, RC4): such messages have no classic form.
	XMLEnc string
	// SigMethod and DigestMethod are the XML-Signature algorithm URIs.
	SigMethod, DigestMethod string

	kind   cipherKind
	keyLen int
	hash   func() hash.Hash
}

type cipherKind int

const (
	kindGCM cipherKind = iota
	kindChaCha
	kindCBC
	kindRC4
)

const (
	dsNS    = "http://www.w3.org/2000/09/xmldsig#"
	xencNS  = "http://www.w3.org/2001/04/xmlenc#"
	excC14N = "http://www.w3.org/2001/10/xml-exc-c14n#"
)

var suites = []*Suite{
	{Name: "aes128-gcm", XMLEnc: "http://www.w3.org/2009/xmlenc11#aes128-gcm", SigMethod: "http://www.w3.org/2001/04/xmldsig-more#hmac-sha256", DigestMethod: "http://www.w3.org/2001/04/xmlenc#sha256", kind: kindGCM, keyLen: 16, hash: sha256.New},
	{Name: "aes256-gcm", XMLEnc: "http://www.w3.org/2009/xmlenc11#aes256-gcm", SigMethod: "http://www.w3.org/2001/04/xmldsig-more#hmac-sha256", DigestMethod: "http://www.w3.org/2001/04/xmlenc#sha256", kind: kindGCM, keyLen: 32, hash: sha256.New},
	{Name: "chacha20-poly1305", SigMethod: "http://www.w3.org/2001/04/xmldsig-more#hmac-sha256", DigestMethod: "http://www.w3.org/2001/04/xmlenc#sha256", kind: kindChaCha, keyLen: 32, hash: sha256.New},
	{Name: "aes128-cbc-sha1", Legacy: true, XMLEnc: "http://www.w3.org/2001/04/xmlenc#aes128-cbc", SigMethod: dsNS + "hmac-sha1", DigestMethod: dsNS + "sha1", kind: kindCBC, keyLen: 16, hash: sha1.New},
	{Name: "rc4-sha1", Legacy: true, LabOnly: true, SigMethod: dsNS + "hmac-sha1", DigestMethod: dsNS + "sha1", kind: kindRC4, keyLen: 16, hash: sha1.New},
}

// DefaultSuite is what a device uses unless told otherwise.
const DefaultSuite = "aes128-gcm"

// SuiteByName finds a suite.
func SuiteByName(name string) (*Suite, error) {
	for _, s := range suites {
		if s.Name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("wssec: unknown algorithm %q (known: %s)", name, strings.Join(SuiteNames(), ", "))
}

// SuiteNames lists every suite, modern first.
func SuiteNames() []string {
	out := make([]string, len(suites))
	for i, s := range suites {
		out[i] = s.Name
	}
	return out
}

// Scheme URIs name a suite's parts in the compact headers.
const schemeBase = "urn:iotsafe:wssec:"

func (s *Suite) sigScheme() string {
	if s.hash().Size() == sha1.Size {
		return schemeBase + "sig:hmac-sha1"
	}
	return schemeBase + "sig:hmac-sha256"
}
func (s *Suite) encScheme() string { return schemeBase + "enc:" + s.Name }

// suiteOfSchemes is the suite a compact message's two schemes name together.
func suiteOfSchemes(sig, enc string) (*Suite, error) {
	for _, s := range suites {
		if s.encScheme() == enc {
			if s.sigScheme() != sig {
				return nil, fmt.Errorf("%w: signature scheme %q does not go with %q", ErrAlgorithm, sig, enc)
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown encryption scheme %q", ErrAlgorithm, enc)
}

// Policy says which suites a receiver accepts.
type Policy struct{ allowed map[string]bool }

// NewPolicy accepts the named suites: the modern ones when names is empty. A legacy
// suite must be named and allowLegacy set (the operator's explicit opt-in); a lab-only
// suite is refused outright.
func NewPolicy(names []string, allowLegacy bool) (*Policy, error) {
	p := &Policy{allowed: map[string]bool{}}
	if len(names) == 0 {
		for _, s := range suites {
			if !s.Legacy {
				p.allowed[s.Name] = true
			}
		}
		return p, nil
	}
	for _, n := range names {
		s, err := SuiteByName(n)
		if err != nil {
			return nil, err
		}
		switch {
		case s.LabOnly:
			return nil, fmt.Errorf("wssec: %s exists only to reproduce paper 001 in the lab; the hub never accepts it", n)
		case s.Legacy && !allowLegacy:
			return nil, fmt.Errorf("wssec: %s is the paper's legacy suite (CBC with SHA-1): set allow_legacy to accept it, knowingly", n)
		}
		p.allowed[n] = true
	}
	return p, nil
}

// LabPolicy accepts every suite, RC4 included: for the lab's own endpoints only.
func LabPolicy() *Policy {
	p := &Policy{allowed: map[string]bool{}}
	for _, s := range suites {
		p.allowed[s.Name] = true
	}
	return p
}

// Names are the accepted suites, sorted.
func (p *Policy) Names() []string {
	var out []string
	for n := range p.allowed {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (p *Policy) check(s *Suite) error {
	if !p.allowed[s.Name] {
		return fmt.Errorf("%w: %s is not accepted here (accepted: %s)", ErrAlgorithm, s.Name, strings.Join(p.Names(), ", "))
	}
	return nil
}

// KeySize is the length of a device's pre-shared key.
const KeySize = 32

// Key is a device's pre-shared key, named by ID in every message.
type Key struct {
	ID     string
	Secret []byte // KeySize bytes
}

// NewKey makes a random key with a random short id.
func NewKey() (Key, error) {
	var id [6]byte
	secret := make([]byte, KeySize)
	if _, err := rand.Read(id[:]); err != nil {
		return Key{}, err
	}
	if _, err := rand.Read(secret); err != nil {
		return Key{}, err
	}
	return Key{ID: fmt.Sprintf("k%x", id[:]), Secret: secret}, nil
}

// Derived are the keys a suite uses, derived from the device's key with HKDF-SHA256 so
// the cipher and the MAC never share one. A classic peer (xmlsec1) is given these.
type Derived struct {
	Enc, MAC []byte
	aead     cipher.AEAD // the AEAD suites' cipher, made once (safe for concurrent use)
}

// Derive computes the suite's keys from k.
func (s *Suite) Derive(k Key) (Derived, error) {
	if len(k.Secret) != KeySize {
		return Derived{}, fmt.Errorf("wssec: key %s is %d bytes, want %d", k.ID, len(k.Secret), KeySize)
	}
	enc, err := hkdf.Key(sha256.New, k.Secret, nil, "iotsafe wssec enc "+s.Name, s.keyLen)
	if err != nil {
		return Derived{}, err
	}
	mac, err := hkdf.Key(sha256.New, k.Secret, nil, "iotsafe wssec mac "+s.Name, 32)
	if err != nil {
		return Derived{}, err
	}
	d := Derived{Enc: enc, MAC: mac}
	if s.aeadSuite() {
		if d.aead, err = s.aead(enc); err != nil {
			return Derived{}, err
		}
	}
	return d, nil
}

func (s *Suite) mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(s.hash, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func (s *Suite) digest(b []byte) []byte {
	h := s.hash()
	h.Write(b)
	return h.Sum(nil)
}

// ErrAuth is every failure to authenticate or decrypt: one error, whatever failed, so a
// sender learns nothing from it (no padding oracle).
var ErrAuth = errors.New("message authentication failed")

// ErrAlgorithm is an algorithm the receiver does not accept.
var ErrAlgorithm = errors.New("algorithm not accepted")

// encrypt seals plaintext with the suite's cipher. For the AEADs, aad is authenticated
// too; CBC and RC4 leave integrity to the caller's MAC. The output is XML-Encryption's
// CipherValue layout: IV or nonce, then the ciphertext (and tag).
func (s *Suite) encrypt(d Derived, plaintext, aad []byte) ([]byte, error) {
	key := d.Enc
	switch s.kind {
	case kindGCM, kindChaCha:
		a := d.aead
		out := make([]byte, a.NonceSize(), a.NonceSize()+len(plaintext)+a.Overhead())
		if _, err := rand.Read(out); err != nil {
			return nil, err
		}
		return a.Seal(out, out, plaintext, aad), nil
	case kindCBC:
		blk, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		pad := aes.BlockSize - len(plaintext)%aes.BlockSize
		buf := make([]byte, aes.BlockSize+len(plaintext)+pad)
		if _, err := rand.Read(buf[:aes.BlockSize]); err != nil {
			return nil, err
		}
		copy(buf[aes.BlockSize:], plaintext)
		for i := len(buf) - pad; i < len(buf); i++ {
			buf[i] = byte(pad)
		}
		cipher.NewCBCEncrypter(blk, buf[:aes.BlockSize]).CryptBlocks(buf[aes.BlockSize:], buf[aes.BlockSize:])
		return buf, nil
	case kindRC4:
		// A fresh RC4 key per message from a random nonce: RC4 with one key reused
		// across messages would give the keystream away at once.
		out := make([]byte, 16+len(plaintext))
		if _, err := rand.Read(out[:16]); err != nil {
			return nil, err
		}
		c, err := rc4.NewCipher(s.mac(key, out[:16])[:16])
		if err != nil {
			return nil, err
		}
		c.XORKeyStream(out[16:], plaintext)
		return out, nil
	}
	return nil, errors.New("wssec: no cipher")
}

// decrypt reverses encrypt; every failure is ErrAuth.
func (s *Suite) decrypt(d Derived, data, aad []byte) ([]byte, error) {
	key := d.Enc
	switch s.kind {
	case kindGCM, kindChaCha:
		a := d.aead
		if a == nil || len(data) < a.NonceSize()+a.Overhead() {
			return nil, ErrAuth
		}
		out, err := a.Open(nil, data[:a.NonceSize()], data[a.NonceSize():], aad)
		if err != nil {
			return nil, ErrAuth
		}
		return out, nil
	case kindCBC:
		blk, err := aes.NewCipher(key)
		if err != nil || len(data) < 2*aes.BlockSize || len(data)%aes.BlockSize != 0 {
			return nil, ErrAuth
		}
		out := make([]byte, len(data)-aes.BlockSize)
		cipher.NewCBCDecrypter(blk, data[:aes.BlockSize]).CryptBlocks(out, data[aes.BlockSize:])
		// XML-Encryption padding: the last byte counts the padding (the other padding
		// bytes are arbitrary). Checked without a branch on secret data.
		pad := int(out[len(out)-1])
		ok := subtle.ConstantTimeLessOrEq(1, pad) & subtle.ConstantTimeLessOrEq(pad, aes.BlockSize)
		if ok != 1 {
			return nil, ErrAuth
		}
		return out[:len(out)-pad], nil
	case kindRC4:
		if len(data) < 16 {
			return nil, ErrAuth
		}
		c, err := rc4.NewCipher(s.mac(key, data[:16])[:16])
		if err != nil {
			return nil, ErrAuth
		}
		out := make([]byte, len(data)-16)
		c.XORKeyStream(out, data[16:])
		return out, nil
	}
	return nil, ErrAuth
}

func (s *Suite) aead(key []byte) (cipher.AEAD, error) {
	if s.kind == kindChaCha {
		return chacha20poly1305.New(key)
	}
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(blk)
}

// aeadSuite reports whether the cipher authenticates by itself.
func (s *Suite) aeadSuite() bool { return s.kind == kindGCM || s.kind == kindChaCha }

// Only accepts exactly s: what a sender expects its answers in.
func Only(s *Suite) *Policy { return &Policy{allowed: map[string]bool{s.Name: true}} }
