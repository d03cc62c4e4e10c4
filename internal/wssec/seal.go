package wssec

import (
	"bytes"
	"fmt"
	"strings"
)

// The sealers write each message, and the canonical forms its signature or record covers,
// directly: the sender controls the serialization, so it need not build a tree and
// canonicalize it (a third of what sealing cost). The receivers never rely on this: they
// parse and canonicalize whatever arrives. TestDirectSealersMatchTheTree holds these
// writers to the tree's serialization and canonical forms.

// bodyScope is where a payload's prefixes resolve: a Body under an Envelope declaring the
// sealers' prefixes (read only, shared).
var bodyScope = func() *Node {
	env := el("s", "Envelope", "xmlns:s", SOAPNS, "xmlns:a", WSANS, "xmlns:u", WSUNS, "xmlns:d", WSDNS, "xmlns:c", CompNS)
	body := el("s", "Body")
	env.add(body)
	return body
}()

// checkPayload refuses a payload the receiver could not put back.
func checkPayload(b []byte) error {
	if _, err := parseFragment(b, bodyScope, Limits{}); err != nil {
		return fmt.Errorf("wssec: the payload: %w", err)
	}
	return nil
}

// ws writes parts to b without joining them first.
func ws(b *bytes.Buffer, parts ...string) {
	for _, p := range parts {
		b.WriteString(p)
	}
}

// header is one addressing header: its name, wsu:Id and value.
type header struct{ local, id, value string }

func headers(m Message) []header {
	hs := make([]header, 0, 4)
	for _, h := range []header{{"To", "to", m.To}, {"Action", "ac", m.Action}, {"MessageID", "id", m.MessageID}, {"RelatesTo", "re", m.RelatesTo}} {
		if h.value != "" {
			hs = append(hs, h)
		}
	}
	return hs
}

// sealCSec encrypts the Body's content, then signs the addressing headers, a timestamp
// and the encrypted Body with a compact signature. The signature is defined over the
// classic form of the encrypted Body (xenc:EncryptedData, see classicEncryptedData), so
// the compact and classic forms carry one signature value and the adapters need no key;
// and a receiver verifies before it decrypts anything.
func sealCSec(m Message, s *Suite, keyID string, d Derived) ([]byte, error) {
	if err := checkPayload(m.Body); err != nil {
		return nil, err
	}
	ct, err := s.encrypt(d, m.Body, nil)
	if err != nil {
		return nil, err
	}
	cv := b64.EncodeToString(ct)
	created := m.Created.UTC().Format(TimeLayout)
	hs := headers(m)

	// The canonical form of each signed element, digested.
	refs := make([]string, 0, len(hs)+2)
	digests := make([][]byte, 0, len(hs)+2)
	var c bytes.Buffer
	c.Grow(1024)
	for _, h := range hs {
		c.Reset()
		ws(&c, `<a:`, h.local, ` xmlns:a="`, WSANS, `" xmlns:u="`, WSUNS, `" u:Id="`, h.id, `">`)
		escapeText(&c, h.value)
		ws(&c, `</a:`, h.local, `>`)
		refs, digests = append(refs, h.id), append(digests, s.digest(c.Bytes()))
	}
	c.Reset()
	ws(&c, `<u:Timestamp xmlns:u="`, WSUNS, `" u:Id="ts"><u:Created>`, created, `</u:Created></u:Timestamp>`)
	refs, digests = append(refs, "ts"), append(digests, s.digest(c.Bytes()))
	c.Reset()
	ws(&c, `<s:Body xmlns:s="`, SOAPNS, `" xmlns:u="`, WSUNS, `" u:Id="b"><xenc:EncryptedData xmlns:xenc="`, xencNS, `" Type="`, xencNS, `Content"><xenc:EncryptionMethod Algorithm="`)
	escapeAttr(&c, s.encMethod())
	ws(&c, `"></xenc:EncryptionMethod><ds:KeyInfo xmlns:ds="`, dsNS, `"><ds:KeyName>`)
	escapeText(&c, keyID)
	ws(&c, `</ds:KeyName></ds:KeyInfo><xenc:CipherData><xenc:CipherValue>`, cv, `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData></s:Body>`)
	refs, digests = append(refs, "b"), append(digests, s.digest(c.Bytes()))
	sig := s.mac(d.MAC, canonicalSignedInfo(s, refs, digests, nil))

	var b bytes.Buffer
	b.Grow(768 + len(cv))
	ws(&b, `<s:Envelope xmlns:s="`, SOAPNS, `" xmlns:a="`, WSANS, `" xmlns:u="`, WSUNS, `" xmlns:d="`, WSDNS, `" xmlns:c="`, CompNS, `"><s:Header>`)
	for _, h := range hs {
		ws(&b, `<a:`, h.local, ` u:Id="`, h.id, `">`)
		escapeText(&b, h.value)
		ws(&b, `</a:`, h.local, `>`)
	}
	ws(&b, `<d:Security><u:Timestamp u:Id="ts"><u:Created>`, created, `</u:Created></u:Timestamp><c:Enc Scheme="`)
	escapeAttr(&b, s.encScheme())
	b.WriteString(`"/><d:Sig Scheme="`)
	escapeAttr(&b, s.sigScheme())
	b.WriteString(`" KeyId="`)
	escapeAttr(&b, keyID)
	ws(&b, `" Refs="`, strings.Join(refs, " "), `" Sig="`, b64.EncodeToString(sig), `"/></d:Security></s:Header><s:Body u:Id="b"><c:EncryptedData>`, cv, `</c:EncryptedData></s:Body></s:Envelope>`)
	return b.Bytes(), nil
}

// sealSecRec replaces the Body with one record: with an AEAD the payload is sealed with
// the headers as associated data; with the paper's CBC and RC4 suites the payload and its
// HMAC are encrypted together, as a TLS record does.
func sealSecRec(m Message, s *Suite, keyID string, d Derived) ([]byte, error) {
	if err := checkPayload(m.Body); err != nil {
		return nil, err
	}
	created := m.Created.UTC().Format(TimeLayout)
	hs := headers(m)
	// The Header as written, and its canonical form (each header declares its prefix).
	var hdr, canon bytes.Buffer
	hdr.WriteString(`<s:Header>`)
	ws(&canon, `<s:Header xmlns:s="`, SOAPNS, `">`)
	for _, h := range hs {
		ws(&hdr, `<a:`, h.local, `>`)
		escapeText(&hdr, h.value)
		ws(&hdr, `</a:`, h.local, `>`)
		ws(&canon, `<a:`, h.local, ` xmlns:a="`, WSANS, `">`)
		escapeText(&canon, h.value)
		ws(&canon, `</a:`, h.local, `>`)
	}
	hdr.WriteString(`</s:Header>`)
	canon.WriteString(`</s:Header>`)
	aad := recordAADCanonical(s.recScheme(), keyID, created, canon.Bytes())
	plain := m.Body
	if !s.aeadSuite() {
		plain = append(append([]byte{}, m.Body...), s.mac(d.MAC, aad, m.Body)...)
		aad = nil
	}
	ct, err := s.encrypt(d, plain, aad)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(512 + len(ct)*4/3)
	ws(&b, `<s:Envelope xmlns:s="`, SOAPNS, `" xmlns:a="`, WSANS, `" xmlns:c="`, CompNS, `">`)
	b.Write(hdr.Bytes())
	b.WriteString(`<s:Body><c:Record Scheme="`)
	escapeAttr(&b, s.recScheme())
	b.WriteString(`" KeyId="`)
	escapeAttr(&b, keyID)
	ws(&b, `" Created="`, created, `" CipherData="`, b64.EncodeToString(ct), `"/></s:Body></s:Envelope>`)
	return b.Bytes(), nil
}
