package wssec

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// The sealers as first written, over the tree: the reference the direct writers in
// seal.go are held to (TestDirectSealersMatchTheTree).

// sealCSec encrypts the Body's content, then signs the addressing headers, a timestamp
// and the encrypted Body with a compact signature. The signature is defined over the
// classic form of the encrypted Body (xenc:EncryptedData, see classicEncryptedData), so
// the compact and classic forms carry one signature value and the adapters need no key;
// and a receiver verifies before it decrypts anything.
func sealCSecTree(m Message, s *Suite, keyID string, d Derived) ([]byte, error) {
	env := el("s", "Envelope", "xmlns:s", SOAPNS, "xmlns:a", WSANS, "xmlns:u", WSUNS, "xmlns:d", WSDNS, "xmlns:c", CompNS)
	hdr, body := el("s", "Header"), el("s", "Body", "u:Id", "b")
	env.add(hdr, body)
	hdr.add(addressingHeaders(m, true)...)
	sec := el("d", "Security")
	hdr.add(sec)
	ts := el("u", "Timestamp", "u:Id", "ts").add(el("u", "Created").add(text(m.Created.UTC().Format(TimeLayout))))
	sec.add(ts)
	// The payload must be XML the receiver can put back.
	if _, err := parseFragment(m.Body, body, Limits{}); err != nil {
		return nil, fmt.Errorf("wssec: the payload: %w", err)
	}
	ct, err := s.encrypt(d, m.Body, nil)
	if err != nil {
		return nil, err
	}
	cv := b64.EncodeToString(ct)
	body.replaceKids([]*Node{classicEncryptedData(s, keyID, cv)})
	var refs []string
	for _, h := range hdr.Elements() {
		if id, ok := h.Attr(WSUNS, "Id"); ok {
			refs = append(refs, id)
		}
	}
	refs = append(refs, "ts", "b")
	sig, err := compactSignature(s, d.MAC, env, refs, nil)
	if err != nil {
		return nil, err
	}
	body.replaceKids([]*Node{el("c", "EncryptedData").add(text(cv))})
	sec.add(el("c", "Enc", "Scheme", s.encScheme()),
		el("d", "Sig", "Scheme", s.sigScheme(), "KeyId", keyID, "Refs", strings.Join(refs, " "), "Sig", b64.EncodeToString(sig)))
	return env.Marshal(), nil
}

// sealSecRec replaces the Body with one record: with an AEAD the payload is sealed with
// the headers as associated data; with the paper's CBC and RC4 suites the payload and its
// HMAC are encrypted together, as a TLS record does.
func sealSecRecTree(m Message, s *Suite, keyID string, d Derived) ([]byte, error) {
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

// The direct writers produce what the tree sealers did, byte for byte apart from the
// random parts (ciphertext, signature), for every suite and format, with values that
// need escaping and with optional headers absent; and their messages open.
func TestDirectSealersMatchTheTree(t *testing.T) {
	k := testKey(t)
	k.ID = "k&<\"id>"
	r := receiver(k, LabPolicy())
	r.Replay = nil
	msgs := []Message{msg(1), {Action: "urn:a&b<c>\"d", MessageID: "urn:uuid:x", RelatesTo: "urn:uuid:y", Created: t0,
		Body: []byte(`text &amp; <n:x xmlns:n="urn:n" a="1&amp;2">v</n:x>`)}}
	for _, name := range SuiteNames() {
		s, _ := SuiteByName(name)
		d, _ := s.Derive(k)
		for _, m := range msgs {
			for f, pair := range map[Format][2]func(Message, *Suite, string, Derived) ([]byte, error){
				CSec: {sealCSec, sealCSecTree}, SecRec: {sealSecRec, sealSecRecTree}} {
				fast, err := pair[0](m, s, k.ID, d)
				if err != nil {
					t.Fatal(err)
				}
				tree, _ := pair[1](m, s, k.ID, d)
				if _, err := r.Open(fast); err != nil {
					t.Fatalf("%s %s: the direct writer's message does not open: %v\n%s", f, name, err, fast)
				}
				root, _ := Parse(fast, Limits{})
				if again := root.Marshal(); !bytes.Equal(again, fast) {
					t.Fatalf("%s %s: not the tree's serialization:\n%s\n%s", f, name, fast, again)
				}
				if a, b := blankRandom(t, fast), blankRandom(t, tree); a != b {
					t.Fatalf("%s %s: shapes differ:\n%s\n%s", f, name, a, b)
				}
			}
		}
	}
}

// blankRandom writes a message with its ciphertext and signature values emptied.
func blankRandom(t *testing.T, msg []byte) string {
	root, err := Parse(msg, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *Node)
	walk = func(n *Node) {
		for i, a := range n.Attrs {
			if a.Local == "CipherData" || a.Local == "Sig" {
				n.Attrs[i].Value = ""
			}
		}
		if n.Is(CompNS, "EncryptedData") {
			n.replaceKids(nil)
		}
		for _, k := range n.Elements() {
			walk(k)
		}
	}
	walk(root)
	return strings.TrimSpace(string(root.Marshal()))
}
