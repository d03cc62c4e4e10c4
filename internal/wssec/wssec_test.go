package wssec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)

func testKey(t testing.TB) Key {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func receiver(k Key, p *Policy) *Receiver {
	return &Receiver{Policy: p, Key: func(id string) (Key, bool) { return k, id == k.ID },
		Replay: NewReplay(0, 0), Now: func() time.Time { return t0 }}
}

func msg(i int) Message {
	return Message{To: "urn:iotsafe:hub", Action: "urn:iotsafe:soap:1/Notify", MessageID: fmt.Sprintf("urn:uuid:%08d", i), Created: t0,
		Body: []byte(`<n:Notification xmlns:n="urn:iotsafe:soap:1" name="temp"><n:value>21.5</n:value></n:Notification>`)}
}

// Both formats, every suite: what is sealed opens to the same message.
func TestSealOpenEverySuite(t *testing.T) {
	k := testKey(t)
	r := receiver(k, LabPolicy())
	for i, name := range SuiteNames() {
		s, _ := SuiteByName(name)
		for j, f := range []Format{CSec, SecRec} {
			m := msg(10*i + j)
			out, err := Seal(f, m, s, k)
			if err != nil {
				t.Fatalf("%s %s: %v", f, name, err)
			}
			if bytes.Contains(out, []byte("21.5")) {
				t.Fatalf("%s %s: the payload is in the clear: %s", f, name, out)
			}
			o, err := r.Open(out)
			if err != nil {
				t.Fatalf("%s %s: open: %v\n%s", f, name, err, out)
			}
			if o.Format != f || o.Suite != s || o.KeyID != k.ID || o.MessageID != m.MessageID || o.Action != m.Action ||
				o.To != m.To || !o.Created.Equal(m.Created) || !bytes.Equal(o.Body, m.Body) {
				t.Fatalf("%s %s: opened %+v", f, name, o)
			}
			if len(o.Payload) != 1 || !o.Payload[0].Is("urn:iotsafe:soap:1", "Notification") {
				t.Fatalf("%s %s: payload %+v", f, name, o.Payload)
			}
		}
	}
}

// A message changed anywhere that matters is refused, with one error for every
// cryptographic failure.
func TestTamperedMessagesAreRefused(t *testing.T) {
	k := testKey(t)
	s, _ := SuiteByName(DefaultSuite)
	for _, f := range []Format{CSec, SecRec} {
		out, err := Seal(f, msg(1), s, k)
		if err != nil {
			t.Fatal(err)
		}
		for name, edit := range map[string]func(string) string{
			"action":  func(x string) string { return strings.Replace(x, "soap:1/Notify", "soap:1/Notifx", 1) },
			"to":      func(x string) string { return strings.Replace(x, "urn:iotsafe:hub", "urn:iotsafe:huc", 1) },
			"msgid":   func(x string) string { return strings.Replace(x, "urn:uuid:00000001", "urn:uuid:00000002", 1) },
			"created": func(x string) string { return strings.Replace(x, "18:00:00.000Z", "18:00:01.000Z", 1) },
		} {
			_, err := receiver(k, nil2(t)).Open([]byte(edit(string(out))))
			if !errors.Is(err, ErrAuth) {
				t.Errorf("%s with %s changed: %v", f, name, err)
			}
		}
		// A flipped ciphertext bit.
		bad := flipCipher(t, out)
		if _, err := receiver(k, nil2(t)).Open(bad); !errors.Is(err, ErrAuth) {
			t.Errorf("%s with a flipped ciphertext: %v", f, err)
		}
		// Another key of the same id.
		other := testKey(t)
		other.ID = k.ID
		if _, err := receiver(other, nil2(t)).Open(out); !errors.Is(err, ErrAuth) {
			t.Errorf("%s under the wrong key: %v", f, err)
		}
		// An unknown key id.
		if _, err := receiver(testKey(t), nil2(t)).Open(out); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("%s with an unknown key id: %v", f, err)
		}
	}
}

func nil2(t testing.TB) *Policy {
	p, err := NewPolicy(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// flipCipher changes one bit of the ciphertext in either format.
func flipCipher(t *testing.T, out []byte) []byte {
	t.Helper()
	root, err := Parse(out, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := splitEnvelope(root)
	if rec := e.body.Child(CompNS, "Record"); rec != nil {
		for i, a := range rec.Attrs {
			if a.Local == "CipherData" {
				ct, _ := b64.DecodeString(a.Value)
				ct[len(ct)/2] ^= 1
				rec.Attrs[i].Value = b64.EncodeToString(ct)
			}
		}
	} else {
		ed := e.body.Child(CompNS, "EncryptedData")
		ct, _ := b64.DecodeString(ed.Content())
		ct[len(ct)/2] ^= 1
		ed.replaceKids([]*Node{text(b64.EncodeToString(ct))})
	}
	return root.Marshal()
}

func TestReplayAndTimeWindow(t *testing.T) {
	k := testKey(t)
	s, _ := SuiteByName(DefaultSuite)
	r := receiver(k, nil2(t))
	for _, f := range []Format{CSec, SecRec} {
		m := msg(7)
		m.MessageID += string(f)
		out, _ := Seal(f, m, s, k)
		if _, err := r.Open(out); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Open(out); !errors.Is(err, ErrReplay) {
			t.Fatalf("%s replayed: %v", f, err)
		}
		m.MessageID += "-old"
		m.Created = t0.Add(-DefaultWindow - time.Second)
		out, _ = Seal(f, m, s, k)
		if _, err := r.Open(out); !errors.Is(err, ErrExpired) {
			t.Fatalf("%s too old: %v", f, err)
		}
	}
	// Ids are forgotten once their messages could no longer be accepted.
	rp := NewReplay(time.Minute, 1)
	if err := rp.Check("k", "a", t0, t0); err != nil {
		t.Fatal(err)
	}
	if err := rp.Check("k", "b", t0, t0); !errors.Is(err, ErrBusy) {
		t.Fatalf("a full window took another id: %v", err)
	}
	// Each key has its own window: another key is not affected by a full one.
	if err := rp.Check("k2", "b", t0, t0); err != nil {
		t.Fatalf("another key refused while one key's window is full: %v", err)
	}
	if err := rp.Check("k", "b", t0.Add(time.Minute), t0.Add(time.Minute)); err != nil || rp.Len() != 2 {
		t.Fatalf("an expired id was not forgotten: %v %d", err, rp.Len())
	}
	// A message the receiver could not act on may come again.
	rp.Forget("k", "b")
	if err := rp.Check("k", "b", t0.Add(time.Minute), t0.Add(time.Minute)); err != nil {
		t.Fatalf("a forgotten id is still a replay: %v", err)
	}
}

// The hub's policy: modern suites by default, the paper's only on opt-in, RC4 never.
func TestPolicy(t *testing.T) {
	k := testKey(t)
	cbc, _ := SuiteByName("aes128-cbc-sha1")
	out, _ := Seal(SecRec, msg(1), cbc, k)
	if _, err := receiver(k, nil2(t)).Open(out); !errors.Is(err, ErrAlgorithm) {
		t.Fatalf("legacy suite by default: %v", err)
	}
	if _, err := NewPolicy([]string{"aes128-cbc-sha1"}, false); err == nil {
		t.Fatal("a legacy suite without the opt-in")
	}
	p, err := NewPolicy([]string{"aes128-cbc-sha1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiver(k, p).Open(out); err != nil {
		t.Fatalf("legacy suite opted in: %v", err)
	}
	if _, err := NewPolicy([]string{"rc4-sha1"}, true); err == nil || !strings.Contains(err.Error(), "never") {
		t.Fatalf("rc4 at the hub: %v", err)
	}
	if _, err := NewPolicy([]string{"aes512"}, true); err == nil {
		t.Fatal("an unknown suite")
	}
}

// Hostile documents are refused before any element is looked at.
func TestHostileXMLIsRefused(t *testing.T) {
	deep := strings.Repeat("<a>", 100) + strings.Repeat("</a>", 100)
	for name, doc := range map[string]string{
		"billion laughs": `<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><l>&b;</l>`,
		"external":       `<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>`,
		"undeclared":     `<x>&e;</x>`,
		"deep":           deep,
		"huge attribute": `<x a="` + strings.Repeat("A", DefaultLimits.MaxAttrLen+1) + `"/>`,
		"repeated attr":  `<x xmlns:p="u" xmlns:q="u" p:a="1" q:a="2"/>`,
		"pi":             `<x><?php evil?></x>`,
		"unbound prefix": `<p:x/>`,
		"two roots":      `<x/><y/>`,
		"mismatched":     `<x></y>`,
		"unclosed":       `<x>`,
		"text outside":   `hello<x/>`,
	} {
		if _, err := Parse([]byte(doc), Limits{}); !errors.Is(err, ErrHostileXML) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Parse([]byte(strings.Repeat(" ", DefaultLimits.MaxBytes+1)), Limits{}); !errors.Is(err, ErrHostileXML) {
		t.Error("an oversized document")
	}
}

// Signature wrapping: a signed Body moved into a header, with an attacker's Body in its
// place, is refused; so are two elements with one id.
func TestSignatureWrappingIsRefused(t *testing.T) {
	k := testKey(t)
	s, _ := SuiteByName(DefaultSuite)
	out, _ := Seal(CSec, msg(3), s, k)
	root, _ := Parse(out, Limits{})
	e, _ := splitEnvelope(root)
	orig := e.body
	// Move the original (signed) Body into a wrapper header; put a new Body in place.
	wrapper := el("c", "Wrapper")
	e.header.add(wrapper)
	root.remove(orig)
	wrapper.add(orig)
	evil := el("s", "Body", "u:Id", "evil")
	evil.add(el("c", "EncryptedData").add(text(orig.Child(CompNS, "EncryptedData").Content())))
	root.add(evil)
	if _, err := receiver(k, nil2(t)).Open(root.Marshal()); !errors.Is(err, ErrFormat) {
		t.Fatalf("wrapped body: %v", err)
	}
	// The new Body claiming the signed id: two elements carry it.
	evil.Attrs[0].Value = "b"
	if _, err := receiver(k, nil2(t)).Open(root.Marshal()); !errors.Is(err, ErrFormat) {
		t.Fatalf("duplicate id: %v", err)
	}
}

// Exclusive canonicalization on the cases that matter here: namespaces rendered where
// used (not where declared), attributes sorted by namespace URI, escaping, empty
// elements as pairs, the default namespace undeclared when needed.
func TestCanonicalize(t *testing.T) {
	doc := `<r xmlns="urn:d" xmlns:a="urn:a" xmlns:b="urn:b" xmlns:unused="urn:u"><a:x b:z="2" a:y="1" c="3&amp;&lt;&quot;"/><y xmlns="">t&gt;&amp;</y></r>`
	root, err := Parse([]byte(doc), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := string(Canonicalize(root.Kids[0], nil))
	want := `<a:x xmlns:a="urn:a" xmlns:b="urn:b" c="3&amp;&lt;&quot;" a:y="1" b:z="2"></a:x>`
	if got != want {
		t.Fatalf("subtree:\n got %s\nwant %s", got, want)
	}
	got = string(Canonicalize(root, nil))
	want = `<r xmlns="urn:d"><a:x xmlns:a="urn:a" xmlns:b="urn:b" c="3&amp;&lt;&quot;" a:y="1" b:z="2"></a:x><y xmlns="">t&gt;&amp;</y></r>`
	if got != want {
		t.Fatalf("document:\n got %s\nwant %s", got, want)
	}
	got = string(Canonicalize(root.Kids[0], []string{"unused"}))
	if !strings.Contains(got, `xmlns:unused="urn:u"`) {
		t.Fatalf("inclusive prefix not rendered: %s", got)
	}
}

// The keyring derives once per key and suite, and never hands out keys derived from
// another secret under the same id.
func TestKeyring(t *testing.T) {
	ring := NewKeyring(2)
	k := testKey(t)
	s, _ := SuiteByName(DefaultSuite)
	d1, _ := ring.Derive(s, k)
	want, _ := s.Derive(k)
	if !bytes.Equal(d1.Enc, want.Enc) || !bytes.Equal(d1.MAC, want.MAC) {
		t.Fatal("derived keys differ from the suite's")
	}
	other := testKey(t)
	other.ID = k.ID
	d2, _ := ring.Derive(s, other)
	if bytes.Equal(d2.Enc, d1.Enc) {
		t.Fatal("a new secret under an old id got the old derived keys")
	}
	for range 3 {
		ring.Derive(s, testKey(t))
	}
	if len(ring.m) > 2 {
		t.Fatalf("the ring holds %d keys, bound 2", len(ring.m))
	}
	ring.Reset()
	if len(ring.m) != 0 {
		t.Fatal("Reset kept keys")
	}
}

// The hot path's SignedInfo bytes are exactly the canonical form of the SignedInfo the
// classic adapter writes (with and without an inclusive prefix list).
func TestCanonicalSignedInfo(t *testing.T) {
	k := testKey(t)
	for _, name := range SuiteNames() {
		s, _ := SuiteByName(name)
		out, _ := Seal(CSec, msg(1), s, k)
		root, _ := Parse(out, Limits{})
		ids, _ := indexIDs(root)
		refs := []string{"to", "ac", "id", "ts", "b"}
		for _, prefixes := range [][]string{nil, {"s", "#default"}} {
			si, err := signedInfo(s, root, refs, prefixes)
			if err != nil {
				t.Fatal(err)
			}
			var digests [][]byte
			for _, id := range refs {
				digests = append(digests, s.digest(Canonicalize(ids[id], prefixes)))
			}
			if got, want := canonicalSignedInfo(s, refs, digests, prefixes), Canonicalize(si, nil); !bytes.Equal(got, want) {
				t.Fatalf("%s %v:\n got %s\nwant %s", name, prefixes, got, want)
			}
		}
	}
}

// The receiver's directly written Body equals the general path's canonical form, for
// our messages and for odd but valid Bodies (default namespace, more attributes).
func TestCanonicalEncryptedBody(t *testing.T) {
	k := testKey(t)
	s, _ := SuiteByName(DefaultSuite)
	out, _ := Seal(CSec, msg(1), s, k)
	docs := [][]byte{out,
		bytes.Replace(out, []byte(`<s:Body u:Id="b">`), []byte(`<Body xmlns="http://www.w3.org/2003/05/soap-envelope" z="1" u:Id="b" a="&amp;">`), 1),
	}
	docs[1] = bytes.Replace(docs[1], []byte(`</s:Body>`), []byte(`</Body>`), 1)
	for i, doc := range docs {
		root, err := Parse(doc, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		e, _ := splitEnvelope(root)
		cv := e.body.Elements()[0].Content()
		fast, ok := canonicalEncryptedBody(e.body, s, k.ID, cv, nil)
		if !ok {
			t.Fatalf("doc %d: no direct form", i)
		}
		e.body.replaceKids([]*Node{classicEncryptedData(s, k.ID, cv)})
		if want := Canonicalize(e.body, nil); !bytes.Equal(fast, want) {
			t.Fatalf("doc %d:\n got %s\nwant %s", i, fast, want)
		}
	}
}
