package hostkey

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"
)

// OpenSSH's global requests for host key rotation (PROTOCOL, section 2.5).
const (
	// AnnounceRequest: the server lists its host keys, once per connection, after
	// authentication (no reply wanted).
	AnnounceRequest = "hostkeys-00@openssh.com"
	// ProveRequest: the client lists the announced keys it does not know yet; the
	// server answers with a signature by each, in order.
	ProveRequest = "hostkeys-prove-00@openssh.com"
	// RetiredRequest is iotsafe's own: after an announcement, the keys the hub retired
	// (no reply wanted; other clients ignore it). OpenSSH drops from known_hosts every key
	// a server leaves out of its announcement, which also drops the key of another hub
	// behind the same name; the agent drops only what the hub says it retired.
	RetiredRequest = "hostkeys-retired@iotsafe.dev"
)

// MaxKeys bounds a list of host keys in either request; a hub has at most two per type.
const MaxKeys = 16

// MarshalKeys encodes keys as the requests carry them: one SSH string per key blob.
func MarshalKeys(keys []ssh.PublicKey) []byte {
	var b []byte
	for _, k := range keys {
		b = appendString(b, k.Marshal())
	}
	return b
}

// ParseKeys decodes a list of host keys from either request: at most MaxKeys, each a
// key this build can parse, nothing after the last.
func ParseKeys(payload []byte) ([]ssh.PublicKey, error) {
	var out []ssh.PublicKey
	for rest := payload; len(rest) > 0; {
		if len(out) == MaxKeys {
			return nil, fmt.Errorf("hostkey: more than %d keys", MaxKeys)
		}
		blob, r, ok := readString(rest)
		if !ok {
			return nil, errors.New("hostkey: truncated key list")
		}
		k, err := ssh.ParsePublicKey(blob)
		if err != nil {
			return nil, fmt.Errorf("hostkey: key %d: %w", len(out)+1, err)
		}
		out = append(out, k)
		rest = r
	}
	return out, nil
}

// proofData is what a proof signs: the request's name, the session identifier (so a
// proof cannot be replayed into another session) and the key.
func proofData(sessionID []byte, key ssh.PublicKey) []byte {
	b := appendString(nil, []byte(ProveRequest))
	b = appendString(b, sessionID)
	return appendString(b, key.Marshal())
}

// Prove answers a ProveRequest: a signature by each asked key, which must be one of the
// set's signing or next keys. RSA keys sign with rsa-sha2-512, never SHA-1.
func (s *Set) Prove(sessionID []byte, keys []ssh.PublicKey) ([]byte, error) {
	var reply []byte
	for _, k := range keys {
		signer := s.signerOf(k)
		if signer == nil {
			return nil, fmt.Errorf("hostkey: asked to prove %s, which is not one of this hub's keys", ssh.FingerprintSHA256(k))
		}
		var sig *ssh.Signature
		var err error
		if as, ok := signer.(ssh.AlgorithmSigner); ok && k.Type() == ssh.KeyAlgoRSA {
			sig, err = as.SignWithAlgorithm(rand.Reader, proofData(sessionID, k), ssh.KeyAlgoRSASHA512)
		} else {
			sig, err = signer.Sign(rand.Reader, proofData(sessionID, k))
		}
		if err != nil {
			return nil, fmt.Errorf("hostkey: sign: %w", err)
		}
		reply = appendString(reply, ssh.Marshal(sig))
	}
	return reply, nil
}

func (s *Set) signerOf(k ssh.PublicKey) ssh.Signer {
	want := k.Marshal()
	for _, c := range s.Signing {
		if bytes.Equal(c.PublicKey().Marshal(), want) {
			return c
		}
	}
	for _, c := range s.Next {
		if bytes.Equal(c.PublicKey().Marshal(), want) {
			return c
		}
	}
	return nil
}

// IsNext reports whether k is one of the set's next keys.
func (s *Set) IsNext(k ssh.PublicKey) bool {
	for _, c := range s.Next {
		if bytes.Equal(c.PublicKey().Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}

// VerifyProofs checks a server's answer to a ProveRequest for keys: one valid signature
// by each key over this session's identifier, and nothing more. An RSA proof must use
// SHA-2.
func VerifyProofs(sessionID []byte, keys []ssh.PublicKey, reply []byte) error {
	rest := reply
	for _, k := range keys {
		b, r, ok := readString(rest)
		if !ok {
			return fmt.Errorf("hostkey: no proof for %s", ssh.FingerprintSHA256(k))
		}
		rest = r
		var sig ssh.Signature
		if err := ssh.Unmarshal(b, &sig); err != nil {
			return fmt.Errorf("hostkey: proof for %s: %w", ssh.FingerprintSHA256(k), err)
		}
		if k.Type() == ssh.KeyAlgoRSA && sig.Format != ssh.KeyAlgoRSASHA256 && sig.Format != ssh.KeyAlgoRSASHA512 {
			return fmt.Errorf("hostkey: proof for %s uses %s, not SHA-2", ssh.FingerprintSHA256(k), sig.Format)
		}
		if err := k.Verify(proofData(sessionID, k), &sig); err != nil {
			return fmt.Errorf("hostkey: proof for %s does not verify: %w", ssh.FingerprintSHA256(k), err)
		}
	}
	if len(rest) != 0 {
		return errors.New("hostkey: more proofs than keys asked")
	}
	return nil
}

func appendString(b, s []byte) []byte {
	n := len(s)
	b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return append(b, s...)
}

func readString(b []byte) (s, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	if uint64(len(b)-4) < n {
		return nil, nil, false
	}
	return b[4 : 4+n], b[4+n:], true
}
