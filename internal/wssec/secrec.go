package wssec

import (
	"bytes"
	"crypto/hmac"
	"fmt"
)

func (s *Suite) recScheme() string { return schemeBase + "rec:" + s.Name }

func suiteOfRecord(scheme string) (*Suite, error) {
	for _, s := range suites {
		if s.recScheme() == scheme {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown record scheme %q", ErrAlgorithm, trim(scheme))
}

// recordAAD binds everything outside the record's ciphertext: its scheme, key, creation
// time and the canonical Header (every addressing header), so none can be swapped.
func recordAAD(scheme, keyID, created string, header *Node) []byte {
	return recordAADCanonical(scheme, keyID, created, Canonicalize(header, nil))
}

// recordAADCanonical is recordAAD with the Header already in canonical form.
func recordAADCanonical(scheme, keyID, created string, header []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(scheme) + len(keyID) + len(created) + len(header) + 32)
	b.WriteString("iotsafe wssec record 1\x00")
	for _, s := range []string{scheme, keyID, created} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	b.Write(header)
	return b.Bytes()
}

func (r *Receiver) openSecRec(e *envelope, rec *Node) (*Opened, error) {
	if _, err := onlyChild(e.body, CompNS, "Record"); err != nil {
		return nil, err
	}
	scheme, err := attr(rec, "Scheme")
	if err != nil {
		return nil, err
	}
	s, err := suiteOfRecord(scheme)
	if err != nil {
		return nil, err
	}
	if err := r.Policy.check(s); err != nil {
		return nil, err
	}
	keyID, err := attr(rec, "KeyId")
	if err != nil {
		return nil, err
	}
	createdText, err := attr(rec, "Created")
	if err != nil {
		return nil, err
	}
	created, err := parseCreated(createdText)
	if err != nil {
		return nil, err
	}
	cd, err := attr(rec, "CipherData")
	if err != nil {
		return nil, err
	}
	ct, err := b64.DecodeString(cd)
	if err != nil {
		return nil, fmt.Errorf("%w: CipherData is not base64", ErrFormat)
	}
	key, ok := r.Key(keyID)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, trim(keyID))
	}
	d, err := r.Keyring.Derive(s, key)
	if err != nil {
		return nil, err
	}
	aad := recordAAD(scheme, keyID, createdText, e.header)
	var pt []byte
	if s.aeadSuite() {
		if pt, err = s.decrypt(d, ct, aad); err != nil {
			return nil, ErrAuth
		}
	} else {
		inner, err := s.decrypt(d, ct, nil)
		n := s.hash().Size()
		if err != nil || len(inner) < n {
			return nil, ErrAuth
		}
		pt = inner[:len(inner)-n]
		if !hmac.Equal(s.mac(d.MAC, aad, pt), inner[len(inner)-n:]) {
			return nil, ErrAuth
		}
	}
	kids, err := parseFragment(pt, e.body, r.Limits)
	if err != nil {
		return nil, fmt.Errorf("%w: the decrypted payload: %v", ErrFormat, err)
	}
	e.body.replaceKids(kids)
	o := &Opened{Format: SecRec, Suite: s, KeyID: keyID, Payload: e.body.Kids}
	o.Created = created
	if err := addressing(e.header, &o.Message); err != nil {
		return nil, err
	}
	o.Body = pt
	return o, nil
}
