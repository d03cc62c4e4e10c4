package wssec

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"fmt"
	"strings"
)

var b64 = base64.StdEncoding

// Seal writes m in format f, secured with suite s and key k (Keyring.Seal remembers the
// derived keys).
func Seal(f Format, m Message, s *Suite, k Key) ([]byte, error) {
	return (*Keyring)(nil).Seal(f, m, s, k)
}

// classicEncryptedData is the XML-Encryption form of the compact c:EncryptedData: what
// the compact signature's Body digest is computed over, and what the classic adapter
// writes. Its exact shape (prefixes xenc and ds, no whitespace) is part of the format.
func classicEncryptedData(s *Suite, keyID, cipherValue string) *Node {
	return el("xenc", "EncryptedData", "xmlns:xenc", xencNS, "Type", xencNS+"Content").add(
		el("xenc", "EncryptionMethod", "Algorithm", s.encMethod()),
		el("ds", "KeyInfo", "xmlns:ds", dsNS).add(el("ds", "KeyName").add(text(keyID))),
		el("xenc", "CipherData").add(el("xenc", "CipherValue").add(text(cipherValue))))
}

// encMethod is the cipher's XML-Encryption URI, or this project's scheme URI for a
// cipher XML-Encryption has none for.
func (s *Suite) encMethod() string {
	if s.XMLEnc != "" {
		return s.XMLEnc
	}
	return s.encScheme()
}

// compactSignature is the signature value WS-Discovery's compact signature carries: over
// the SignedInfo an XML Signature of the same references would have.
func compactSignature(s *Suite, macKey []byte, root *Node, refs, prefixes []string) ([]byte, error) {
	return compactSignatureWith(s, macKey, root, refs, prefixes, nil, nil)
}

// compactSignatureWith is compactSignature with the canonical form of one element given
// (the receiver's encrypted Body, written directly rather than built and canonicalized).
func compactSignatureWith(s *Suite, macKey []byte, root *Node, refs, prefixes []string, given *Node, canon []byte) ([]byte, error) {
	ids, err := indexIDs(root)
	if err != nil {
		return nil, err
	}
	digests := make([][]byte, len(refs))
	var buf bytes.Buffer
	buf.Grow(1024)
	for i, id := range refs {
		n, ok := ids[id]
		if !ok {
			return nil, fmt.Errorf("%w: the signature references %q, which no element carries", ErrFormat, trim(id))
		}
		if n == given && canon != nil {
			digests[i] = s.digest(canon)
			continue
		}
		buf.Reset()
		canonicalizeInto(&buf, n, prefixes)
		digests[i] = s.digest(buf.Bytes())
	}
	return s.mac(macKey, canonicalSignedInfo(s, refs, digests, prefixes)), nil
}

// canonicalEncryptedBody is the canonical form of the Body with its content in classic
// form (classicEncryptedData), written directly: the Body's own start tag canonicalized
// alone, then the EncryptedData as canonicalization renders it under any start tag that
// leaves the xenc and ds prefixes unrendered (what every sender writes). Otherwise (or
// with an inclusive prefix list) ok is false and the caller takes the general path.
// TestCanonicalEncryptedBody holds this to the general path.
func canonicalEncryptedBody(body *Node, s *Suite, keyID, cipherValue string, prefixes []string) (canon []byte, ok bool) {
	if len(prefixes) > 0 {
		return nil, false
	}
	shell := &Node{Prefix: body.Prefix, Local: body.Local, Attrs: body.Attrs, NS: body.NS, Parent: body.Parent}
	var b bytes.Buffer
	b.Grow(512 + len(cipherValue))
	canonicalizeInto(&b, shell, nil)
	start := b.Bytes()
	if bytes.Contains(start, []byte(" xmlns:xenc=")) || bytes.Contains(start, []byte(" xmlns:ds=")) {
		return nil, false
	}
	var end bytes.Buffer
	end.WriteString("</")
	writeQName(&end, body.Prefix, body.Local)
	end.WriteByte('>')
	b.Truncate(len(start) - end.Len())
	b.WriteString(`<xenc:EncryptedData xmlns:xenc="` + xencNS + `" Type="` + xencNS + `Content"><xenc:EncryptionMethod Algorithm="`)
	escapeAttr(&b, s.encMethod())
	b.WriteString(`"></xenc:EncryptionMethod><ds:KeyInfo xmlns:ds="` + dsNS + `"><ds:KeyName>`)
	escapeText(&b, keyID)
	b.WriteString(`</ds:KeyName></ds:KeyInfo><xenc:CipherData><xenc:CipherValue>`)
	escapeText(&b, cipherValue)
	b.WriteString(`</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData>`)
	b.Write(end.Bytes())
	return b.Bytes(), true
}

// canonicalSignedInfo writes the canonical form of what signedInfo builds, directly: the
// hot path of every WS-CSec message (TestCanonicalSignedInfo holds the two together).
func canonicalSignedInfo(s *Suite, refs []string, digests [][]byte, prefixes []string) []byte {
	var b bytes.Buffer
	b.Grow(256 + 320*len(refs))
	b.WriteString(`<ds:SignedInfo xmlns:ds="` + dsNS + `"><ds:CanonicalizationMethod Algorithm="` + excC14N + `"></ds:CanonicalizationMethod><ds:SignatureMethod Algorithm="`)
	escapeAttr(&b, s.SigMethod)
	b.WriteString(`"></ds:SignatureMethod>`)
	for i, id := range refs {
		b.WriteString(`<ds:Reference URI="#`)
		escapeAttr(&b, id)
		b.WriteString(`"><ds:Transforms><ds:Transform Algorithm="` + excC14N + `">`)
		if len(prefixes) > 0 {
			b.WriteString(`<ec:InclusiveNamespaces xmlns:ec="` + excC14N + `" PrefixList="`)
			escapeAttr(&b, strings.Join(prefixes, " "))
			b.WriteString(`"></ec:InclusiveNamespaces>`)
		}
		b.WriteString(`</ds:Transform></ds:Transforms><ds:DigestMethod Algorithm="`)
		escapeAttr(&b, s.DigestMethod)
		b.WriteString(`"></ds:DigestMethod><ds:DigestValue>`)
		b.WriteString(b64.EncodeToString(digests[i]))
		b.WriteString(`</ds:DigestValue></ds:Reference>`)
	}
	b.WriteString(`</ds:SignedInfo>`)
	return b.Bytes()
}

// signedInfo builds the SignedInfo implied by a compact signature: exclusive
// canonicalization, the suite's HMAC and digest, one Reference per id.
func signedInfo(s *Suite, root *Node, refs, prefixes []string) (*Node, error) {
	ids, err := indexIDs(root)
	if err != nil {
		return nil, err
	}
	si := el("ds", "SignedInfo", "xmlns:ds", dsNS)
	si.add(el("ds", "CanonicalizationMethod", "Algorithm", excC14N), el("ds", "SignatureMethod", "Algorithm", s.SigMethod))
	for _, id := range refs {
		n, ok := ids[id]
		if !ok {
			return nil, fmt.Errorf("%w: the signature references %q, which no element carries", ErrFormat, trim(id))
		}
		tr := el("ds", "Transform", "Algorithm", excC14N)
		if len(prefixes) > 0 {
			tr.add(el("ec", "InclusiveNamespaces", "xmlns:ec", excC14N, "PrefixList", strings.Join(prefixes, " ")))
		}
		si.add(el("ds", "Reference", "URI", "#"+id).add(
			el("ds", "Transforms").add(tr),
			el("ds", "DigestMethod", "Algorithm", s.DigestMethod),
			el("ds", "DigestValue").add(text(b64.EncodeToString(s.digest(Canonicalize(n, prefixes)))))))
	}
	return si, nil
}

// indexIDs maps every wsu:Id in the document to its element; an id used twice is
// refused (two elements with one id is how signed content gets swapped).
func indexIDs(root *Node) (map[string]*Node, error) {
	ids := map[string]*Node{}
	var walk func(n *Node) error
	walk = func(n *Node) error {
		if n.IsText {
			return nil
		}
		if id, ok := n.Attr(WSUNS, "Id"); ok {
			if _, dup := ids[id]; dup {
				return fmt.Errorf("%w: id %q appears twice", ErrFormat, trim(id))
			}
			ids[id] = n
		}
		for _, k := range n.Kids {
			if err := walk(k); err != nil {
				return err
			}
		}
		return nil
	}
	return ids, walk(root)
}

// one returns the only child {space}local of n: none or several is malformed.
func one(n *Node, space, local string) (*Node, error) {
	var found *Node
	for _, k := range n.Kids {
		if k.Is(space, local) {
			if found != nil {
				return nil, fmt.Errorf("%w: more than one %s", ErrFormat, local)
			}
			found = k
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no %s", ErrFormat, local)
	}
	return found, nil
}

func attr(n *Node, local string) (string, error) {
	v, ok := n.Attr("", local)
	if !ok || v == "" {
		return "", fmt.Errorf("%w: %s without %s", ErrFormat, n.Local, local)
	}
	return v, nil
}

// csecHeader is the compact security header of a message.
type csecHeader struct {
	sec, sig, enc, ts *Node
	suite             *Suite
	keyID, encKey     string // encKey: the c:Enc's own KeyId, if it has one
	refs, prefixes    []string
	sigValue          []byte
}

func readCSecHeader(e *envelope) (*csecHeader, error) {
	h := &csecHeader{}
	var err error
	if h.sec, err = one(e.header, WSDNS, "Security"); err != nil {
		return nil, err
	}
	if h.sig, err = one(h.sec, WSDNS, "Sig"); err != nil {
		return nil, err
	}
	if h.enc, err = one(h.sec, CompNS, "Enc"); err != nil {
		return nil, err
	}
	if h.ts, err = one(h.sec, WSUNS, "Timestamp"); err != nil {
		return nil, err
	}
	sigScheme, err := attr(h.sig, "Scheme")
	if err != nil {
		return nil, err
	}
	encScheme, err := attr(h.enc, "Scheme")
	if err != nil {
		return nil, err
	}
	if h.suite, err = suiteOfSchemes(sigScheme, encScheme); err != nil {
		return nil, err
	}
	if h.keyID, err = attr(h.sig, "KeyId"); err != nil {
		return nil, err
	}
	if k, ok := h.enc.Attr("", "KeyId"); ok && k != h.keyID {
		return nil, fmt.Errorf("%w: the encryption and the signature name different keys", ErrFormat)
	}
	h.encKey, _ = h.enc.Attr("", "KeyId")
	refs, err := attr(h.sig, "Refs")
	if err != nil {
		return nil, err
	}
	h.refs = strings.Fields(refs)
	if p, ok := h.sig.Attr("", "PrefixList"); ok {
		h.prefixes = strings.Fields(p)
	}
	sv, err := attr(h.sig, "Sig")
	if err != nil {
		return nil, err
	}
	if h.sigValue, err = b64.DecodeString(sv); err != nil {
		return nil, fmt.Errorf("%w: the signature value is not base64", ErrFormat)
	}
	return h, nil
}

// encKeyID is the key the encryption names: its own, or the signature's.
func (h *csecHeader) encKeyID() string {
	if h.encKey != "" {
		return h.encKey
	}
	return h.keyID
}

func (r *Receiver) openCSec(e *envelope) (*Opened, error) {
	h, err := readCSecHeader(e)
	if err != nil {
		return nil, err
	}
	if err := r.Policy.check(h.suite); err != nil {
		return nil, err
	}
	key, ok := r.Key(h.keyID)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, trim(h.keyID))
	}
	d, err := r.Keyring.Derive(h.suite, key)
	if err != nil {
		return nil, err
	}
	ed, err := onlyChild(e.body, CompNS, "EncryptedData")
	if err != nil {
		return nil, err
	}
	cv := ed.Content() // as written: the signature covers it so
	ct, err := b64.DecodeString(strings.Join(strings.Fields(cv), ""))
	if err != nil {
		return nil, fmt.Errorf("%w: the encrypted data is not base64", ErrFormat)
	}
	if err := requireSigned(e, h.ts, h.refs); err != nil {
		return nil, err
	}
	// Verify over the classic form of the Body, then decrypt.
	bodyCanon, ok := canonicalEncryptedBody(e.body, h.suite, h.encKeyID(), cv, h.prefixes)
	if !ok {
		e.body.replaceKids([]*Node{classicEncryptedData(h.suite, h.encKeyID(), cv)})
	}
	want, err := compactSignatureWith(h.suite, d.MAC, e.root, h.refs, h.prefixes, e.body, bodyCanon)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(want, h.sigValue) {
		return nil, ErrAuth
	}
	pt, err := r.decryptBody(e, h.suite, d, ct)
	if err != nil {
		return nil, err
	}
	o := &Opened{Format: CSec, Suite: h.suite, KeyID: h.keyID, Payload: e.body.Kids}
	if err := addressing(e.header, &o.Message); err != nil {
		return nil, err
	}
	created, err := one(h.ts, WSUNS, "Created")
	if err != nil {
		return nil, err
	}
	if o.Created, err = parseCreated(created.Content()); err != nil {
		return nil, err
	}
	o.Body = pt
	return o, nil
}

// decryptBody puts the Body's plain content back. A failure here is ErrAuth whatever
// failed (the tag, the padding, or the XML inside), so it tells a sender nothing.
func (r *Receiver) decryptBody(e *envelope, s *Suite, d Derived, ct []byte) ([]byte, error) {
	pt, err := s.decrypt(d, ct, nil)
	if err != nil {
		return nil, ErrAuth
	}
	kids, err := parseFragment(pt, e.body, r.Limits)
	if err != nil {
		return nil, ErrAuth
	}
	e.body.replaceKids(kids)
	return pt, nil
}

// requireSigned checks that the elements a receiver acts on are the ones signed: the
// Body, the timestamp and every addressing header, each found in its place (not by
// id), so signed copies relocated elsewhere in the document change nothing.
func requireSigned(e *envelope, ts *Node, refs []string) error {
	signed := make(map[string]bool, len(refs))
	for _, r := range refs {
		signed[r] = true
	}
	must := []*Node{e.body, ts}
	for _, h := range e.header.Elements() {
		if h.Space() == WSANS {
			must = append(must, h)
		}
	}
	for _, n := range must {
		id, ok := n.Attr(WSUNS, "Id")
		if !ok || !signed[id] {
			return fmt.Errorf("%w: %s is not covered by the signature", ErrFormat, n.Local)
		}
	}
	return nil
}

// onlyChild is n's single element child, which must be {space}local, with nothing else
// but whitespace beside it.
func onlyChild(n *Node, space, local string) (*Node, error) {
	var found *Node
	for _, k := range n.Kids {
		switch {
		case k.IsText && strings.TrimSpace(k.Text) == "":
		case found == nil && k.Is(space, local):
			found = k
		default:
			return nil, fmt.Errorf("%w: the %s must hold one %s and nothing else", ErrFormat, n.Local, local)
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: the %s holds no %s", ErrFormat, n.Local, local)
	}
	return found, nil
}
