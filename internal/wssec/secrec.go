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
	var b bytes.Buffer
	b.WriteString("iotsafe wssec record 1\x00")
	for _, s := range []string{scheme, keyID, created} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	b.Write(Canonicalize(header, nil))
	return b.Bytes()
}

// sealSecRec replaces the Body with one record: with an AEAD the payload is sealed with
// the headers as associated data; with the paper's CBC and RC4 suites the payload and its
// HMAC are encrypted together, as a TLS record does.
func sealSecRec(m Message, s *Suite, keyID string, d Derived) ([]byte, error) {
	env := el("s", "Envelope", "xmlns:s", SOAPNS, "xmlns:a", WSANS, "xmlns:c", CompNS)
	hdr, body := el("s", "Header"), el("s", "Body")
	env.add(hdr, body)
	hdr.add(addressingHeaders(m, false)...)
	// The payload must be XML the receiver can put back.
	if _, err := parseFragment(m.Body, body, Limits{}); err != nil {
		return nil, fmt.Errorf("wssec: the payload: %w", err)
	}
	created := m.Created.UTC().Format(TimeLayout)
	aad := recordAAD(s.recScheme(), keyID, created, hdr)
	plain := m.Body
	if !s.aeadSuite() {
		plain = append(append([]byte{}, m.Body...), s.mac(d.MAC, aad, m.Body)...)
		aad = nil
	}
	ct, err := s.encrypt(d, plain, aad)
	if err != nil {
		return nil, err
	}
	body.add(el("c", "Record", "Scheme", s.recScheme(), "KeyId", keyID, "Created", created, "CipherData", b64.EncodeToString(ct)))
	return env.Marshal(), nil
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
