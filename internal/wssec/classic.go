package wssec

import (
	"bytes"
	"fmt"
	"strings"
)

// ErrNoClassicForm is a message the adapters cannot map without loss.
var ErrNoClassicForm = fmt.Errorf("no lossless classic form")

// ToClassic turns a WS Compact Security message into classic WS-Security: a
// wsse:Security header with the timestamp and an XML Signature (exclusive
// canonicalization, HMAC, one Reference per signed element, the digests written out),
// and the Body's xenc:EncryptedData. It needs no key: the signature value is the compact
// one. xmlsec1 verifies the result with the suite's derived MAC key and decrypts it with
// the derived encryption key (Suite.Derive), both named by the key id.
func ToClassic(data []byte, lim Limits) ([]byte, error) {
	root, err := Parse(data, lim)
	if err != nil {
		return nil, err
	}
	e, err := splitEnvelope(root)
	if err != nil {
		return nil, err
	}
	if e.body.Child(CompNS, "Record") != nil {
		return nil, fmt.Errorf("%w: a security record combines digest and ciphertext in one run, which XML-Signature and XML-Encryption cannot express; open it with the key and seal it as csec first", ErrNoClassicForm)
	}
	h, err := readCSecHeader(e)
	if err != nil {
		return nil, err
	}
	if h.suite.XMLEnc == "" {
		return nil, fmt.Errorf("%w: XML-Encryption has no algorithm for %s", ErrNoClassicForm, h.suite.Name)
	}
	ed, err := onlyChild(e.body, CompNS, "EncryptedData")
	if err != nil {
		return nil, err
	}
	e.body.replaceKids([]*Node{classicEncryptedData(h.suite, h.encKeyID(), ed.Content())})
	si, err := signedInfo(h.suite, root, h.refs, h.prefixes)
	if err != nil {
		return nil, err
	}
	sig := el("ds", "Signature", "xmlns:ds", dsNS).add(si,
		el("ds", "SignatureValue").add(text(b64.EncodeToString(h.sigValue))),
		el("ds", "KeyInfo").add(el("ds", "KeyName").add(text(h.keyID))))
	ts := h.ts
	h.sec.remove(ts)
	wsse := el("wsse", "Security", "xmlns:wsse", WSSENS).add(ts, sig)
	replaceNode(e.header, h.sec, wsse)
	return root.Marshal(), nil
}

// FromClassic turns classic WS-Security, as ToClassic writes it or as xmlsec1 signs and
// encrypts a template of that shape, into WS Compact Security. It checks, without a
// key, that the classic form holds nothing the compact one would lose: one suite for
// every reference, exclusive canonicalization, the digests matching the message, and
// the EncryptedData in its fixed shape; otherwise it says what does not fit.
func FromClassic(data []byte, lim Limits) ([]byte, error) {
	root, err := Parse(data, lim)
	if err != nil {
		return nil, err
	}
	e, err := splitEnvelope(root)
	if err != nil {
		return nil, err
	}
	c, err := readClassic(e)
	if err != nil {
		return nil, err
	}
	// Lossless: what the compact form implies must be exactly what is there.
	if !bytes.Equal(Canonicalize(c.ed, nil), Canonicalize(classicEncryptedData(c.suite, c.encKey, c.cv), nil)) {
		return nil, fmt.Errorf("%w: the EncryptedData has content beyond algorithm, key name and cipher value (whitespace, ids, other key info)", ErrNoClassicForm)
	}
	implied, err := signedInfo(c.suite, root, c.refs, c.prefixes)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(Canonicalize(c.si, nil), Canonicalize(implied, nil)) {
		return nil, fmt.Errorf("%w: the SignedInfo differs from what a compact signature implies (other transforms or digests, whitespace, or digests that do not match the message)", ErrNoClassicForm)
	}
	c.toCompact(e)
	return root.Marshal(), nil
}

// classic is what a classic message's security header and body hold.
type classic struct {
	wsse, ts, si, ed *Node
	sigValue         []byte
	keyID, encKey    string
	suite            *Suite
	refs, prefixes   []string
	cv               string // the cipher value as written (xmlsec1 breaks base64 into lines): the Body's digest covers it
}

// readClassic finds the parts of a classic message: timestamp, signature, encrypted
// body, their key names and the suite they pair to.
func readClassic(e *envelope) (*classic, error) {
	c := &classic{}
	var err error
	if c.wsse, err = one(e.header, WSSENS, "Security"); err != nil {
		return nil, err
	}
	if c.ts, err = one(c.wsse, WSUNS, "Timestamp"); err != nil {
		return nil, err
	}
	sig, err := one(c.wsse, dsNS, "Signature")
	if err != nil {
		return nil, err
	}
	if c.si, err = one(sig, dsNS, "SignedInfo"); err != nil {
		return nil, err
	}
	sv, err := one(sig, dsNS, "SignatureValue")
	if err != nil {
		return nil, err
	}
	if c.sigValue, err = b64.DecodeString(strings.Join(strings.Fields(sv.Content()), "")); err != nil {
		return nil, fmt.Errorf("%w: SignatureValue is not base64", ErrFormat)
	}
	if c.keyID, err = keyName(sig); err != nil {
		return nil, err
	}
	if c.ed, err = onlyChild(e.body, xencNS, "EncryptedData"); err != nil {
		return nil, err
	}
	if c.suite, err = classicSuite(c.ed, c.si); err != nil {
		return nil, err
	}
	if c.refs, c.prefixes, err = classicRefs(c.si); err != nil {
		return nil, err
	}
	if c.encKey, err = keyName(c.ed); err != nil {
		return nil, err
	}
	cvNode, err := one(c.ed, xencNS, "CipherData")
	if err == nil {
		cvNode, err = one(cvNode, xencNS, "CipherValue")
	}
	if err != nil {
		return nil, err
	}
	c.cv = cvNode.Content()
	return c, nil
}

// classicSuite is the suite whose XML Encryption and signature algorithms ed and si
// name.
func classicSuite(ed, si *Node) (*Suite, error) {
	em, err := one(ed, xencNS, "EncryptionMethod")
	if err != nil {
		return nil, err
	}
	encAlg, _ := em.Attr("", "Algorithm")
	sm, err := one(si, dsNS, "SignatureMethod")
	if err != nil {
		return nil, err
	}
	sigAlg, _ := sm.Attr("", "Algorithm")
	var s *Suite
	for _, c := range suites {
		if c.XMLEnc != "" && c.XMLEnc == encAlg && c.SigMethod == sigAlg {
			s = c
		}
	}
	if s == nil {
		return nil, fmt.Errorf("%w: no suite pairs encryption %q with signature %q", ErrNoClassicForm, trim(encAlg), trim(sigAlg))
	}
	return s, nil
}

// classicRefs are the ids si's references name, and their one inclusive prefix list.
func classicRefs(si *Node) (refs, prefixes []string, err error) {
	for _, ref := range si.Elements() {
		if !ref.Is(dsNS, "Reference") {
			continue
		}
		uri, _ := ref.Attr("", "URI")
		if !strings.HasPrefix(uri, "#") || len(uri) < 2 {
			return nil, nil, fmt.Errorf("%w: Reference URI %q is not a same-document id", ErrNoClassicForm, trim(uri))
		}
		refs = append(refs, uri[1:])
		p := inclusivePrefixes(ref)
		if len(refs) > 1 && strings.Join(p, " ") != strings.Join(prefixes, " ") {
			return nil, nil, fmt.Errorf("%w: references with different inclusive prefix lists", ErrNoClassicForm)
		}
		prefixes = p
	}
	return refs, prefixes, nil
}

// toCompact rewrites e in place: the body's EncryptedData and the security header in
// their compact forms.
func (c *classic) toCompact(e *envelope) {
	ns := func(prefix, uri string, n *Node) *Node {
		n.NS = append(n.NS, NSDecl{prefix, uri})
		return n
	}
	e.body.replaceKids([]*Node{ns("c", CompNS, el("c", "EncryptedData").add(text(c.cv)))})
	enc := ns("c", CompNS, el("c", "Enc", "Scheme", c.suite.encScheme()))
	if c.encKey != c.keyID {
		enc.Attrs = append(enc.Attrs, Attr{"", "KeyId", c.encKey})
	}
	compact := el("d", "Sig", "Scheme", c.suite.sigScheme(), "KeyId", c.keyID, "Refs", strings.Join(c.refs, " "))
	if len(c.prefixes) > 0 {
		compact.Attrs = append(compact.Attrs, Attr{"", "PrefixList", strings.Join(c.prefixes, " ")})
	}
	compact.Attrs = append(compact.Attrs, Attr{"", "Sig", b64.EncodeToString(c.sigValue)})
	c.wsse.remove(c.ts)
	sec := ns("d", WSDNS, el("d", "Security")).add(c.ts, enc, compact)
	replaceNode(e.header, c.wsse, sec)
}

// keyName is the ds:KeyInfo/ds:KeyName under n.
func keyName(n *Node) (string, error) {
	ki, err := one(n, dsNS, "KeyInfo")
	if err != nil {
		return "", err
	}
	kn, err := one(ki, dsNS, "KeyName")
	if err != nil {
		return "", fmt.Errorf("%w: only keys named by ds:KeyName map to a compact key id", ErrNoClassicForm)
	}
	name := strings.TrimSpace(kn.Content())
	if name == "" {
		return "", fmt.Errorf("%w: empty KeyName", ErrFormat)
	}
	return name, nil
}

// inclusivePrefixes is a Reference's InclusiveNamespaces PrefixList, if any.
func inclusivePrefixes(ref *Node) []string {
	trs := ref.Child(dsNS, "Transforms")
	if trs == nil {
		return nil
	}
	for _, tr := range trs.Elements() {
		if in := tr.Child(excC14N, "InclusiveNamespaces"); in != nil {
			p, _ := in.Attr("", "PrefixList")
			return strings.Fields(p)
		}
	}
	return nil
}

// replaceNode puts n where old was among parent's children.
func replaceNode(parent, old, n *Node) {
	for i, k := range parent.Kids {
		if k == old {
			parent.Kids[i] = n
			n.Parent = parent
			return
		}
	}
}
