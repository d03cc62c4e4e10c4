package wssec

import (
	"bytes"
	"slices"
	"strings"
)

// Canonicalize is Exclusive XML Canonicalization 1.0 without comments
// (http://www.w3.org/2001/10/xml-exc-c14n#) of the subtree at n, with the
// InclusiveNamespaces prefix list given ("#default" names the default namespace). It is
// what every digest and signature here is computed over, as xmlsec1 computes it.
func Canonicalize(n *Node, inclusive []string) []byte {
	var b bytes.Buffer
	b.Grow(512)
	canonicalizeInto(&b, n, inclusive)
	return b.Bytes()
}

// canonicalizeInto appends the canonical form of n to b (a buffer reused across the
// references of one signature).
func canonicalizeInto(b *bytes.Buffer, n *Node, inclusive []string) {
	incl := make([]string, 0, len(inclusive))
	for _, p := range inclusive {
		if p == "#default" {
			p = ""
		}
		incl = append(incl, p)
	}
	c := canon{b: b, incl: incl, rendered: make([]NSDecl, 1, 8)}
	c.node(n)
}

// canon carries one canonicalization: rendered is a stack of the namespace bindings
// output ancestors rendered (searched from the top; a document's few prefixes make a
// slice faster than maps).
type canon struct {
	b        *bytes.Buffer
	incl     []string
	rendered []NSDecl
	attrs    []sattr
}

type sattr struct {
	uri string
	a   Attr
}

func (c *canon) renderedURI(prefix string) (string, bool) {
	for i := len(c.rendered) - 1; i >= 0; i-- {
		if c.rendered[i].Prefix == prefix {
			return c.rendered[i].URI, true
		}
	}
	return "", false
}

func (c *canon) node(n *Node) {
	b := c.b
	if n.IsText {
		escapeText(b, n.Text)
		return
	}
	mark := len(c.rendered)
	decls := c.namespaces(n, mark)
	attrs := c.sortedAttrs(n)
	b.WriteByte('<')
	writeQName(b, n.Prefix, n.Local)
	for _, d := range decls {
		writeNSDecl(b, d)
	}
	for _, a := range attrs {
		writeAttr(b, a.a)
	}
	c.attrs = attrs[:0] // reused by the children; this element is done with it
	b.WriteByte('>')
	for _, k := range n.Kids {
		c.node(k)
	}
	b.WriteString("</")
	writeQName(b, n.Prefix, n.Local)
	b.WriteByte('>')
	c.rendered = c.rendered[:mark]
}

// namespaces are the declarations n renders, sorted by prefix, appended to c.rendered
// from mark on: the namespaces it visibly uses (its own prefix, and its attributes'),
// plus the inclusive ones in scope, each unless an output ancestor already rendered the
// same binding.
func (c *canon) namespaces(n *Node, mark int) []NSDecl {
	consider := func(p string) {
		if p == "xml" {
			return
		}
		for _, d := range c.rendered[mark:] {
			if d.Prefix == p {
				return // already decided for this element
			}
		}
		uri, ok := n.Lookup(p)
		if !ok {
			return
		}
		cur, seen := c.renderedURI(p)
		if (seen && cur == uri) || (!seen && uri == "") {
			return
		}
		c.rendered = append(c.rendered, NSDecl{p, uri})
	}
	consider(n.Prefix)
	for _, a := range n.Attrs {
		if a.Prefix != "" {
			consider(a.Prefix)
		}
	}
	for _, p := range c.incl {
		if p != "" || hasDefault(n) {
			consider(p)
		}
	}
	decls := c.rendered[mark:]
	if len(decls) > 1 {
		slices.SortFunc(decls, func(x, y NSDecl) int { return strings.Compare(x.Prefix, y.Prefix) })
	}
	return decls
}

// sortedAttrs are n's attributes in canonical order (namespace URI, then local name), in
// c's reused slice.
func (c *canon) sortedAttrs(n *Node) []sattr {
	attrs := c.attrs[:0]
	for _, a := range n.Attrs {
		uri := ""
		if a.Prefix != "" {
			uri, _ = n.Lookup(a.Prefix)
		}
		attrs = append(attrs, sattr{uri, a})
	}
	if len(attrs) > 1 {
		slices.SortFunc(attrs, func(x, y sattr) int {
			if x.uri != y.uri {
				return strings.Compare(x.uri, y.uri)
			}
			return strings.Compare(x.a.Local, y.a.Local)
		})
	}
	return attrs
}

func writeQName(b *bytes.Buffer, prefix, local string) {
	if prefix != "" {
		b.WriteString(prefix)
		b.WriteByte(':')
	}
	b.WriteString(local)
}

// hasDefault reports whether a default namespace is declared in n's scope.
func hasDefault(n *Node) bool {
	uri, _ := n.Lookup("")
	return uri != ""
}

var (
	textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\r", "&#xD;")
	attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", `"`, "&quot;", "\t", "&#x9;", "\n", "&#xA;", "\r", "&#xD;")
)

// textSpecial and attrSpecial mark the bytes escaped in text and in attribute values.
var textSpecial, attrSpecial = special("&<>\r"), special("&<\"\t\n\r")

func special(chars string) (t [256]bool) {
	for i := range len(chars) {
		t[chars[i]] = true
	}
	return t
}

func clean(s string, t *[256]bool) bool {
	for i := range len(s) {
		if t[s[i]] {
			return false
		}
	}
	return true
}

func escapeText(b *bytes.Buffer, s string) {
	if clean(s, &textSpecial) {
		b.WriteString(s)
		return
	}
	textEscaper.WriteString(b, s)
}

func escapeAttr(b *bytes.Buffer, s string) {
	if clean(s, &attrSpecial) {
		b.WriteString(s)
		return
	}
	attrEscaper.WriteString(b, s)
}
