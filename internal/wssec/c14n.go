package wssec

import (
	"bytes"
	"sort"
	"strings"
)

// Canonicalize is Exclusive XML Canonicalization 1.0 without comments
// (http://www.w3.org/2001/10/xml-exc-c14n#) of the subtree at n, with the
// InclusiveNamespaces prefix list given ("#default" names the default namespace). It is
// what every digest and signature here is computed over, as xmlsec1 computes it.
func Canonicalize(n *Node, inclusive []string) []byte {
	var b bytes.Buffer
	incl := make(map[string]bool, len(inclusive))
	for _, p := range inclusive {
		if p == "#default" {
			p = ""
		}
		incl[p] = true
	}
	c14n(&b, n, map[string]string{"": ""}, incl)
	return b.Bytes()
}

func c14n(b *bytes.Buffer, n *Node, rendered map[string]string, incl map[string]bool) {
	if n.IsText {
		escapeText(b, n.Text)
		return
	}
	// The namespaces this element visibly uses (its own prefix, and its attributes'),
	// plus the inclusive ones in scope, each rendered unless an output ancestor already
	// rendered the same binding.
	want := map[string]bool{n.Prefix: true}
	for _, a := range n.Attrs {
		if a.Prefix != "" && a.Prefix != "xml" {
			want[a.Prefix] = true
		}
	}
	for p := range incl {
		if _, ok := n.Lookup(p); ok && (p != "" || hasDefault(n)) {
			want[p] = true
		}
	}
	var decls []NSDecl
	for p := range want {
		if p == "xml" {
			continue
		}
		uri, ok := n.Lookup(p)
		if !ok {
			continue
		}
		if cur, seen := rendered[p]; seen && cur == uri {
			continue
		}
		if !seen(rendered, p) && uri == "" {
			continue
		}
		decls = append(decls, NSDecl{p, uri})
	}
	if len(decls) > 0 {
		next := make(map[string]string, len(rendered)+len(decls))
		for k, v := range rendered {
			next[k] = v
		}
		for _, d := range decls {
			next[d.Prefix] = d.URI
		}
		rendered = next
	}
	sort.Slice(decls, func(i, j int) bool { return decls[i].Prefix < decls[j].Prefix })
	type sattr struct{ uri, local, qn, value string }
	attrs := make([]sattr, 0, len(n.Attrs))
	for _, a := range n.Attrs {
		uri := ""
		if a.Prefix != "" {
			uri, _ = n.Lookup(a.Prefix)
		}
		attrs = append(attrs, sattr{uri, a.Local, qname(a.Prefix, a.Local), a.Value})
	}
	sort.Slice(attrs, func(i, j int) bool {
		if attrs[i].uri != attrs[j].uri {
			return attrs[i].uri < attrs[j].uri
		}
		return attrs[i].local < attrs[j].local
	})
	name := qname(n.Prefix, n.Local)
	b.WriteByte('<')
	b.WriteString(name)
	for _, d := range decls {
		if d.Prefix == "" {
			b.WriteString(` xmlns="`)
		} else {
			b.WriteString(` xmlns:` + d.Prefix + `="`)
		}
		escapeAttr(b, d.URI)
		b.WriteByte('"')
	}
	for _, a := range attrs {
		b.WriteString(" " + a.qn + `="`)
		escapeAttr(b, a.value)
		b.WriteByte('"')
	}
	b.WriteByte('>')
	for _, k := range n.Kids {
		c14n(b, k, rendered, incl)
	}
	b.WriteString("</" + name + ">")
}

func seen(m map[string]string, p string) bool { _, ok := m[p]; return ok }

// hasDefault reports whether a default namespace is declared in n's scope.
func hasDefault(n *Node) bool {
	uri, _ := n.Lookup("")
	return uri != ""
}

var (
	textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\r", "&#xD;")
	attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", `"`, "&quot;", "\t", "&#x9;", "\n", "&#xA;", "\r", "&#xD;")
)

func escapeText(b *bytes.Buffer, s string) { textEscaper.WriteString(b, s) }
func escapeAttr(b *bytes.Buffer, s string) { attrEscaper.WriteString(b, s) }
