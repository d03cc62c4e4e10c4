package wssec

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
)

// parseNodesStd is the parser as it was, over encoding/xml's raw tokens: the oracle the
// scanner is fuzzed against.
func parseNodesStd(data []byte, parent *Node, lim Limits) ([]*Node, error) {
	lim = lim.orDefault()
	if len(data) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrHostileXML, len(data), lim.MaxBytes)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true // unknown entities are errors; none are ever expanded
	var (
		top      []*Node
		stack    []*Node
		elements int
		first    = true
	)
	add := func(n *Node) {
		if len(stack) == 0 {
			n.Parent = parent
			top = append(top, n)
			return
		}
		p := stack[len(stack)-1]
		n.Parent = p
		p.Kids = append(p.Kids, n)
	}
	for {
		tok, err := dec.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrHostileXML, err)
		}
		isFirst := first
		first = false
		switch t := tok.(type) {
		case xml.StartElement:
			elements++
			if elements > lim.MaxElements {
				return nil, fmt.Errorf("%w: more than %d elements", ErrHostileXML, lim.MaxElements)
			}
			if len(stack) >= lim.MaxDepth {
				return nil, fmt.Errorf("%w: elements nested deeper than %d", ErrHostileXML, lim.MaxDepth)
			}
			n, err := element(t, lim)
			if err != nil {
				return nil, err
			}
			add(n)
			stack = append(stack, n)
			if err := n.checkPrefixes(); err != nil {
				return nil, err
			}
		case xml.EndElement:
			if len(stack) == 0 {
				return nil, fmt.Errorf("%w: end tag </%s> without a start", ErrHostileXML, t.Name.Local)
			}
			top := stack[len(stack)-1]
			if top.Prefix != t.Name.Space || top.Local != t.Name.Local {
				return nil, fmt.Errorf("%w: <%s> closed by </%s>", ErrHostileXML, qname(top.Prefix, top.Local), qname(t.Name.Space, t.Name.Local))
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 && len(bytes.TrimSpace(t)) != 0 && parent == nil {
				return nil, fmt.Errorf("%w: text outside the document element", ErrHostileXML)
			}
			add(&Node{IsText: true, Text: string(t)})
		case xml.Comment:
		case xml.ProcInst:
			if t.Target != "xml" || !isFirst || parent != nil {
				return nil, fmt.Errorf("%w: processing instruction <?%s?>", ErrHostileXML, t.Target)
			}
		case xml.Directive:
			return nil, fmt.Errorf("%w: DTDs and entity declarations are not accepted", ErrHostileXML)
		}
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("%w: <%s> is not closed", ErrHostileXML, stack[len(stack)-1].Local)
	}
	return mergeText(top), nil
}

func element(t xml.StartElement, lim Limits) (*Node, error) {
	if len(t.Attr) > lim.MaxAttrs {
		return nil, fmt.Errorf("%w: <%s> has %d attributes, more than %d", ErrHostileXML, t.Name.Local, len(t.Attr), lim.MaxAttrs)
	}
	if len(t.Name.Local)+len(t.Name.Space) > lim.MaxNameLen || t.Name.Local == "" {
		return nil, fmt.Errorf("%w: element name of %d bytes", ErrHostileXML, len(t.Name.Local)+len(t.Name.Space))
	}
	n := &Node{Prefix: t.Name.Space, Local: t.Name.Local}
	seen := make(map[xml.Name]bool, len(t.Attr))
	for _, a := range t.Attr {
		if seen[a.Name] {
			return nil, fmt.Errorf("%w: attribute %s repeated on <%s>", ErrHostileXML, qname(a.Name.Space, a.Name.Local), t.Name.Local)
		}
		seen[a.Name] = true
		if len(a.Value) > lim.MaxAttrLen {
			return nil, fmt.Errorf("%w: attribute %s of %d bytes, more than %d", ErrHostileXML, a.Name.Local, len(a.Value), lim.MaxAttrLen)
		}
		if len(a.Name.Local)+len(a.Name.Space) > lim.MaxNameLen || a.Name.Local == "" {
			return nil, fmt.Errorf("%w: attribute name of %d bytes", ErrHostileXML, len(a.Name.Local)+len(a.Name.Space))
		}
		switch {
		case a.Name.Space == "" && a.Name.Local == "xmlns":
			n.NS = append(n.NS, NSDecl{"", a.Value})
		case a.Name.Space == "xmlns":
			if a.Value == "" {
				return nil, fmt.Errorf("%w: xmlns:%s undeclares a prefix", ErrHostileXML, a.Name.Local)
			}
			if a.Name.Local == "xml" || a.Name.Local == "xmlns" {
				return nil, fmt.Errorf("%w: xmlns:%s may not be declared", ErrHostileXML, a.Name.Local)
			}
			n.NS = append(n.NS, NSDecl{a.Name.Local, a.Value})
		default:
			n.Attrs = append(n.Attrs, Attr{a.Name.Space, a.Name.Local, a.Value})
		}
	}
	return n, nil
}

// The scanner never accepts what encoding/xml refuses, and where both accept they build
// the same tree. (It may refuse more: non-ASCII names, odd XML declarations.)
func FuzzScanMatchesEncodingXML(f *testing.F) {
	f.Add([]byte(`<?xml version="1.0" encoding="UTF-8"?><a xmlns="urn:x" xmlns:p="urn:p" p:b='1&amp;&#x41;&#66;'>t&lt;<![CDATA[<raw>]]><p:c/><!-- c --></a>`))
	f.Add([]byte("<a>\r\n x \r y</a>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ferr := scanNodes(b, nil, Limits{})
		std, serr := parseNodesStd(b, nil, Limits{})
		if ferr != nil {
			return
		}
		if serr != nil {
			t.Fatalf("the scanner accepts what encoding/xml refuses (%v): %q", serr, b)
		}
		if got, want := dump(fast), dump(std); got != want {
			t.Fatalf("trees differ for %q:\n scan %s\n  std %s", b, got, want)
		}
	})
}

func dump(nodes []*Node) string {
	var b strings.Builder
	var walk func(n *Node)
	walk = func(n *Node) {
		if n.IsText {
			fmt.Fprintf(&b, "T%q", n.Text)
			return
		}
		fmt.Fprintf(&b, "E(%s:%s %v %v)[", n.Prefix, n.Local, n.NS, n.Attrs)
		for _, k := range n.Kids {
			walk(k)
		}
		b.WriteString("]")
	}
	for _, n := range nodes {
		walk(n)
	}
	return b.String()
}
