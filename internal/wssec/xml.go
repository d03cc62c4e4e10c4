package wssec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Limits bound what Parse accepts from a peer. The zero value means DefaultLimits.
type Limits struct {
	MaxBytes    int // the whole document
	MaxDepth    int // element nesting
	MaxElements int // elements in the document
	MaxAttrs    int // attributes (and namespace declarations) on one element
	MaxAttrLen  int // one attribute value
	MaxNameLen  int // one element or attribute name
}

// DefaultLimits fit a device message with a payload of up to 64 KiB.
var DefaultLimits = Limits{MaxBytes: 256 << 10, MaxDepth: 24, MaxElements: 2048, MaxAttrs: 24, MaxAttrLen: 128 << 10, MaxNameLen: 128}

func (l Limits) orDefault() Limits {
	if l == (Limits{}) {
		return DefaultLimits
	}
	return l
}

// ErrHostileXML wraps every refusal of a document's shape (DTDs, entities, depth,
// sizes): the caller answers it with a fault, never by trying harder.
var ErrHostileXML = errors.New("refused XML")

// Node is an element or a text node of a parsed document. Names keep the prefixes as
// written, because exclusive canonicalization renders them.
type Node struct {
	Text   string // a text node's characters (IsText)
	IsText bool
	Prefix string // an element's prefix ("" for none)
	Local  string
	Attrs  []Attr   // attributes other than namespace declarations, in document order
	NS     []NSDecl // namespace declarations on this element
	Kids   []*Node
	Parent *Node
}

// Attr is an attribute as written.
type Attr struct{ Prefix, Local, Value string }

// NSDecl is xmlns:Prefix="URI" (Prefix "" is the default namespace).
type NSDecl struct{ Prefix, URI string }

// xmlNS is the namespace the "xml" prefix is bound to without a declaration.
const xmlNS = "http://www.w3.org/XML/1998/namespace"

// Lookup resolves a prefix in n's scope ("" is the default namespace).
func (n *Node) Lookup(prefix string) (string, bool) {
	if prefix == "xml" {
		return xmlNS, true
	}
	for e := n; e != nil; e = e.Parent {
		for _, d := range e.NS {
			if d.Prefix == prefix {
				return d.URI, true
			}
		}
	}
	if prefix == "" {
		return "", true // no default namespace
	}
	return "", false
}

// Space is the namespace of n's name.
func (n *Node) Space() string {
	uri, _ := n.Lookup(n.Prefix)
	return uri
}

// Is reports whether n is the element {space}local.
func (n *Node) Is(space, local string) bool {
	return n != nil && !n.IsText && n.Local == local && n.Space() == space
}

// Attr returns the value of the attribute {space}local (space "" for unqualified).
func (n *Node) Attr(space, local string) (string, bool) {
	for _, a := range n.Attrs {
		if a.Local != local {
			continue
		}
		if a.Prefix == "" {
			if space == "" {
				return a.Value, true
			}
			continue
		}
		if uri, _ := n.Lookup(a.Prefix); uri == space {
			return a.Value, true
		}
	}
	return "", false
}

// Elements are n's element children.
func (n *Node) Elements() []*Node {
	var out []*Node
	for _, k := range n.Kids {
		if !k.IsText {
			out = append(out, k)
		}
	}
	return out
}

// Child is n's first element child {space}local, or nil.
func (n *Node) Child(space, local string) *Node {
	for _, k := range n.Kids {
		if k.Is(space, local) {
			return k
		}
	}
	return nil
}

// Content is the concatenated text of n's text children.
func (n *Node) Content() string {
	var b strings.Builder
	for _, k := range n.Kids {
		if k.IsText {
			b.WriteString(k.Text)
		}
	}
	return b.String()
}

// Parse reads one document under the limits, refusing anything a device message does
// not need: DTDs (and with them entity expansion and external entities), processing
// instructions other than the XML declaration, undeclared prefixes, repeated
// attributes, mismatched tags and anything past the limits. Comments are dropped.
func Parse(data []byte, lim Limits) (*Node, error) {
	nodes, err := scanNodes(data, nil, lim)
	if err != nil {
		return nil, err
	}
	var root *Node
	for _, n := range nodes {
		switch {
		case n.IsText && strings.TrimSpace(n.Text) == "":
		case n.IsText:
			return nil, fmt.Errorf("%w: text outside the document element", ErrHostileXML)
		case root != nil:
			return nil, fmt.Errorf("%w: more than one document element", ErrHostileXML)
		default:
			root = n
		}
	}
	if root == nil {
		return nil, fmt.Errorf("%w: no document element", ErrHostileXML)
	}
	return root, nil
}

// parseFragment parses content (elements and text) as the children of parent, resolving
// prefixes in parent's scope: how decrypted Body content is put back.
func parseFragment(data []byte, parent *Node, lim Limits) ([]*Node, error) {
	return scanNodes(data, parent, lim)
}

// mergeText joins adjacent text nodes (the decoder may split text at CDATA sections).
func mergeText(nodes []*Node) []*Node {
	out := nodes[:0]
	for _, n := range nodes {
		if n.IsText && len(out) > 0 && out[len(out)-1].IsText {
			out[len(out)-1].Text += n.Text
			continue
		}
		if !n.IsText {
			n.Kids = mergeText(n.Kids)
		}
		out = append(out, n)
	}
	return out
}

// checkPrefixes refuses a prefix with no declaration in scope, and two attributes that
// are the same once their prefixes are resolved (compared pairwise: elements have few).
func (n *Node) checkPrefixes() error {
	if _, ok := n.Lookup(n.Prefix); !ok {
		return fmt.Errorf("%w: prefix %q of <%s> is not declared", ErrHostileXML, n.Prefix, n.Local)
	}
	for i, a := range n.Attrs {
		if a.Prefix == "" {
			continue
		}
		uri, ok := n.Lookup(a.Prefix)
		if !ok {
			return fmt.Errorf("%w: prefix %q of attribute %s is not declared", ErrHostileXML, a.Prefix, a.Local)
		}
		for _, b := range n.Attrs[:i] {
			if b.Local != a.Local || b.Prefix == "" {
				continue
			}
			if other, _ := n.Lookup(b.Prefix); other == uri {
				return fmt.Errorf("%w: attribute {%s}%s repeated on <%s>", ErrHostileXML, uri, a.Local, n.Local)
			}
		}
	}
	return nil
}

func qname(prefix, local string) string {
	if prefix == "" {
		return local
	}
	return prefix + ":" + local
}

// Marshal writes n as XML (namespace declarations first, then attributes, as held).
func (n *Node) Marshal() []byte {
	var b bytes.Buffer
	b.Grow(1024)
	n.write(&b)
	return b.Bytes()
}

func (n *Node) write(b *bytes.Buffer) {
	if n.IsText {
		escapeText(b, n.Text)
		return
	}
	b.WriteByte('<')
	writeQName(b, n.Prefix, n.Local)
	for _, d := range n.NS {
		writeNSDecl(b, d)
	}
	for _, a := range n.Attrs {
		writeAttr(b, a)
	}
	if len(n.Kids) == 0 {
		b.WriteString("/>")
		return
	}
	b.WriteByte('>')
	for _, k := range n.Kids {
		k.write(b)
	}
	b.WriteString("</")
	writeQName(b, n.Prefix, n.Local)
	b.WriteByte('>')
}

// el builds an element (the builder used for every message this package writes).
func el(prefix, local string, attrs ...string) *Node {
	n := &Node{Prefix: prefix, Local: local}
	for i := 0; i+1 < len(attrs); i += 2 {
		p, l, ok := strings.Cut(attrs[i], ":")
		if !ok {
			p, l = "", attrs[i]
		}
		if p == "xmlns" {
			n.NS = append(n.NS, NSDecl{l, attrs[i+1]})
			continue
		}
		n.Attrs = append(n.Attrs, Attr{p, l, attrs[i+1]})
	}
	return n
}

// add appends kids (elements or text) and returns n.
func (n *Node) add(kids ...*Node) *Node {
	for _, k := range kids {
		k.Parent = n
		n.Kids = append(n.Kids, k)
	}
	return n
}

func text(s string) *Node { return &Node{IsText: true, Text: s} }

// replaceKids makes kids n's only children.
func (n *Node) replaceKids(kids []*Node) {
	n.Kids = nil
	n.add(kids...)
}

// remove takes k out of n's children.
func (n *Node) remove(k *Node) {
	for i, c := range n.Kids {
		if c == k {
			n.Kids = append(n.Kids[:i:i], n.Kids[i+1:]...)
			return
		}
	}
}

// writeNSDecl writes one namespace declaration, with its leading space.
func writeNSDecl(b *bytes.Buffer, d NSDecl) {
	if d.Prefix == "" {
		b.WriteString(` xmlns="`)
	} else {
		b.WriteString(` xmlns:`)
		b.WriteString(d.Prefix)
		b.WriteString(`="`)
	}
	escapeAttr(b, d.URI)
	b.WriteByte('"')
}

// writeAttr writes one attribute, with its leading space.
func writeAttr(b *bytes.Buffer, a Attr) {
	b.WriteByte(' ')
	writeQName(b, a.Prefix, a.Local)
	b.WriteString(`="`)
	escapeAttr(b, a.Value)
	b.WriteByte('"')
}
