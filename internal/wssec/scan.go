package wssec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// scanNodes is the parser: a scanner for the XML a device message can hold, about five
// times faster than encoding/xml on these messages (every message is parsed once or
// twice on the hot path of the hub and of a device). It accepts a subset of what
// encoding/xml accepts (checked by FuzzScanMatchesEncodingXML against that decoder):
// ASCII names, the five predefined entities and character references, CDATA, comments,
// and an XML declaration at the start of a document; nothing with a DTD.
func scanNodes(data []byte, parent *Node, lim Limits) ([]*Node, error) {
	lim = lim.orDefault()
	if len(data) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrHostileXML, len(data), lim.MaxBytes)
	}
	s := scanner{data: data, lim: lim, parent: parent}
	if err := s.run(); err != nil {
		return nil, err
	}
	return mergeText(s.top), nil
}

type scanner struct {
	data     []byte
	pos      int
	lim      Limits
	parent   *Node
	top      []*Node
	stack    []*Node
	elements int
	buf      []byte
	slab     []Node
}

func (s *scanner) errf(format string, a ...any) error {
	return fmt.Errorf("%w: %s at byte %d", ErrHostileXML, fmt.Sprintf(format, a...), s.pos)
}

func (s *scanner) add(n *Node) {
	if len(s.stack) == 0 {
		n.Parent = s.parent
		s.top = append(s.top, n)
		return
	}
	p := s.stack[len(s.stack)-1]
	n.Parent = p
	if p.Kids == nil {
		p.Kids = make([]*Node, 0, 4)
	}
	p.Kids = append(p.Kids, n)
}

func (s *scanner) run() error {
	d := s.data
	if s.parent == nil && bytes.HasPrefix(d, []byte("<?xml")) && len(d) > 5 && isSpace(d[5]) {
		end := bytes.Index(d, []byte("?>"))
		if end < 0 {
			return s.errf("unterminated XML declaration")
		}
		if !xmlDecl.Match(d[5:end]) {
			return s.errf("an XML declaration other than version 1.0 in UTF-8")
		}
		s.pos = end + 2
	}
	for s.pos < len(d) {
		if d[s.pos] != '<' {
			if err := s.text(); err != nil {
				return err
			}
			continue
		}
		rest := d[s.pos:]
		switch {
		case bytes.HasPrefix(rest, []byte("</")):
			if err := s.endTag(); err != nil {
				return err
			}
		case bytes.HasPrefix(rest, []byte("<!--")):
			end := bytes.Index(rest[4:], []byte("--"))
			if end < 0 {
				return s.errf("unterminated comment")
			}
			if 4+end+2 >= len(rest) || rest[4+end+2] != '>' {
				return s.errf(`"--" inside a comment`)
			}
			s.pos += 4 + end + 3
		case bytes.HasPrefix(rest, []byte("<![CDATA[")):
			end := bytes.Index(rest[9:], []byte("]]>"))
			if end < 0 {
				return s.errf("unterminated CDATA section")
			}
			if len(s.stack) == 0 && s.parent == nil {
				return s.errf("text outside the document element")
			}
			t, err := s.checkText(normalizeNewlines(rest[9 : 9+end]))
			if err != nil {
				return err
			}
			s.add(&Node{IsText: true, Text: t})
			s.pos += 9 + end + 3
		case bytes.HasPrefix(rest, []byte("<!")):
			return s.errf("DTDs and entity declarations are not accepted")
		case bytes.HasPrefix(rest, []byte("<?")):
			return s.errf("processing instruction")
		default:
			if err := s.startTag(); err != nil {
				return err
			}
		}
	}
	if len(s.stack) != 0 {
		return s.errf("<%s> is not closed", s.stack[len(s.stack)-1].Local)
	}
	return nil
}

// xmlDecl is what an XML declaration may say: version 1.0, UTF-8, standalone.
var xmlDecl = regexp.MustCompile(`^[ \t\r\n]+version[ \t\r\n]*=[ \t\r\n]*("1\.0"|'1\.0')([ \t\r\n]+encoding[ \t\r\n]*=[ \t\r\n]*("[Uu][Tt][Ff]-8"|'[Uu][Tt][Ff]-8'))?([ \t\r\n]+standalone[ \t\r\n]*=[ \t\r\n]*("(yes|no)"|'(yes|no)'))?[ \t\r\n]*$`)

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) && isSpace(s.data[s.pos]) {
		s.pos++
	}
}

func isNameStart(b byte) bool { return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
func isNameByte(b byte) bool {
	return isNameStart(b) || b >= '0' && b <= '9' || b == '-' || b == '.'
}

// qname reads PREFIX:LOCAL or LOCAL (ASCII names).
func (s *scanner) qname() (prefix, local string, err error) {
	start := s.pos
	colon := -1
	for s.pos < len(s.data) {
		b := s.data[s.pos]
		switch {
		case b == ':' && colon < 0 && s.pos > start:
			colon = s.pos
		case isNameByte(b) && (s.pos > start && s.pos != colon+1 || isNameStart(b)):
		case b >= 0x80:
			return "", "", s.errf("a name with a character beyond ASCII")
		default:
			goto done
		}
		s.pos++
	}
done:
	n := s.data[start:s.pos]
	if len(n) == 0 || colon == s.pos-1 {
		return "", "", s.errf("a name is missing")
	}
	if len(n) > s.lim.MaxNameLen {
		return "", "", s.errf("name of %d bytes", len(n))
	}
	if colon < 0 {
		return "", intern(n), nil
	}
	return intern(s.data[start:colon]), intern(s.data[colon+1 : s.pos]), nil
}

// names are the names and prefixes of device messages, shared instead of allocated for
// every element (a map index with string(b) does not allocate).
var names = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"s", "a", "u", "d", "c", "n", "ds", "xenc", "wsse", "wsu", "ec", "xmlns", "xml",
		"Envelope", "Header", "Body", "To", "Action", "MessageID", "RelatesTo", "Security", "Sig", "Enc", "Timestamp",
		"Created", "EncryptedData", "Record", "Scheme", "KeyId", "Refs", "PrefixList", "CipherData", "Id",
		"Notification", "NotificationAck", "name", "value", "id", "timestamp", "Fault", "Code", "Value", "Subcode", "Reason", "Text", "lang",
		"Signature", "SignedInfo", "CanonicalizationMethod", "SignatureMethod", "Reference", "Transforms", "Transform",
		"DigestMethod", "DigestValue", "SignatureValue", "KeyInfo", "KeyName", "EncryptionMethod", "CipherValue",
		"InclusiveNamespaces", "Algorithm", "URI", "Type"} {
		m[n] = n
	}
	return m
}()

func intern(b []byte) string {
	if n, ok := names[string(b)]; ok {
		return n
	}
	return string(b)
}

func (s *scanner) startTag() error {
	s.pos++ // '<'
	s.elements++
	if s.elements > s.lim.MaxElements {
		return s.errf("more than %d elements", s.lim.MaxElements)
	}
	if len(s.stack) >= s.lim.MaxDepth {
		return s.errf("elements nested deeper than %d", s.lim.MaxDepth)
	}
	prefix, local, err := s.qname()
	if err != nil {
		return err
	}
	n := s.node()
	n.Prefix, n.Local = prefix, local
	for {
		hadSpace := s.pos < len(s.data) && isSpace(s.data[s.pos])
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.errf("unterminated <%s>", local)
		}
		switch s.data[s.pos] {
		case '>':
			s.pos++
			s.add(n)
			s.stack = append(s.stack, n)
			return n.checkPrefixes()
		case '/':
			if s.pos+1 >= len(s.data) || s.data[s.pos+1] != '>' {
				return s.errf("'/' not followed by '>' in <%s>", local)
			}
			s.pos += 2
			s.add(n)
			return n.checkPrefixes()
		}
		if !hadSpace {
			return s.errf("attributes of <%s> not separated by space", local)
		}
		if err := s.attr(n); err != nil {
			return err
		}
	}
}

func (s *scanner) attr(n *Node) error {
	prefix, local, err := s.qname()
	if err != nil {
		return err
	}
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != '=' {
		return s.errf("attribute %s without a value", local)
	}
	s.pos++
	s.skipSpace()
	if s.pos >= len(s.data) || (s.data[s.pos] != '"' && s.data[s.pos] != '\'') {
		return s.errf("attribute %s: value not quoted", local)
	}
	q := s.data[s.pos]
	s.pos++
	end := bytes.IndexByte(s.data[s.pos:], q)
	if end < 0 {
		return s.errf("unterminated attribute %s", local)
	}
	raw := s.data[s.pos : s.pos+end]
	if bytes.IndexByte(raw, '<') >= 0 {
		return s.errf("'<' in attribute %s", local)
	}
	v, err := s.decode(raw)
	if err != nil {
		return err
	}
	s.pos += end + 1
	if len(v) > s.lim.MaxAttrLen {
		return s.errf("attribute %s of %d bytes, more than %d", local, len(v), s.lim.MaxAttrLen)
	}
	if len(n.Attrs)+len(n.NS) >= s.lim.MaxAttrs {
		return s.errf("<%s> has more than %d attributes", n.Local, s.lim.MaxAttrs)
	}
	for _, a := range n.Attrs {
		if a.Prefix == prefix && a.Local == local {
			return s.errf("attribute %s repeated on <%s>", qname(prefix, local), n.Local)
		}
	}
	switch {
	case prefix == "" && local == "xmlns":
		for _, d := range n.NS {
			if d.Prefix == "" {
				return s.errf("xmlns repeated on <%s>", n.Local)
			}
		}
		n.NS = append(n.NS, NSDecl{"", v})
	case prefix == "xmlns":
		if v == "" {
			return s.errf("xmlns:%s undeclares a prefix", local)
		}
		if local == "xml" || local == "xmlns" {
			return s.errf("xmlns:%s may not be declared", local)
		}
		for _, d := range n.NS {
			if d.Prefix == local {
				return s.errf("xmlns:%s repeated on <%s>", local, n.Local)
			}
		}
		if n.NS == nil {
			n.NS = make([]NSDecl, 0, 6)
		}
		n.NS = append(n.NS, NSDecl{local, v})
	default:
		if n.Attrs == nil {
			n.Attrs = make([]Attr, 0, 4)
		}
		n.Attrs = append(n.Attrs, Attr{prefix, local, v})
	}
	return nil
}

func (s *scanner) endTag() error {
	s.pos += 2
	prefix, local, err := s.qname()
	if err != nil {
		return err
	}
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != '>' {
		return s.errf("unterminated </%s>", local)
	}
	s.pos++
	if len(s.stack) == 0 {
		return s.errf("end tag </%s> without a start", local)
	}
	top := s.stack[len(s.stack)-1]
	if top.Prefix != prefix || top.Local != local {
		return s.errf("<%s> closed by </%s>", qname(top.Prefix, top.Local), qname(prefix, local))
	}
	s.stack = s.stack[:len(s.stack)-1]
	return nil
}

func (s *scanner) text() error {
	end := bytes.IndexByte(s.data[s.pos:], '<')
	if end < 0 {
		end = len(s.data) - s.pos
	}
	raw := s.data[s.pos : s.pos+end]
	if bytes.Contains(raw, []byte("]]>")) {
		return s.errf("unescaped ]]> outside CDATA")
	}
	if len(s.stack) == 0 && s.parent == nil && len(bytes.TrimLeft(raw, " \t\r\n")) != 0 {
		return s.errf("text outside the document element")
	}
	t, err := s.decode(raw)
	if err != nil {
		return err
	}
	s.pos += end
	n := s.node()
	n.IsText, n.Text = true, t
	s.add(n)
	return nil
}

// node takes a node from the scanner's slab (one allocation for many nodes, sized to the
// input: about one node per 48 bytes of these messages).
func (s *scanner) node() *Node {
	if len(s.slab) == 0 {
		s.slab = make([]Node, min(64, max(4, (len(s.data)-s.pos)/48)))
	}
	n := &s.slab[0]
	s.slab = s.slab[1:]
	return n
}

// decode resolves references and newlines in text or an attribute value, and checks
// that what results is UTF-8 of XML characters.
func (s *scanner) decode(raw []byte) (string, error) {
	if bytes.IndexByte(raw, '&') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return s.checkText(raw)
	}
	out := s.buf[:0]
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		switch b {
		case '\r':
			out = append(out, '\n')
			if i+1 < len(raw) && raw[i+1] == '\n' {
				i++
			}
		case '&':
			semi := bytes.IndexByte(raw[i:], ';')
			if semi < 0 {
				return "", s.errf("a reference without ';'")
			}
			ref := string(raw[i+1 : i+semi])
			switch ref {
			case "lt":
				out = append(out, '<')
			case "gt":
				out = append(out, '>')
			case "amp":
				out = append(out, '&')
			case "apos":
				out = append(out, '\'')
			case "quot":
				out = append(out, '"')
			default:
				r, ok := charRef(ref)
				if !ok {
					return "", s.errf("entity &%s; (only the predefined ones and character references)", trim(ref))
				}
				out = utf8.AppendRune(out, r)
			}
			i += semi
		default:
			out = append(out, b)
		}
	}
	s.buf = out
	return s.checkText(out)
}

// charRef reads "#123" or "#x7B".
func charRef(ref string) (rune, bool) {
	if len(ref) < 2 || ref[0] != '#' {
		return 0, false
	}
	digits, base := ref[1:], 10
	if digits[0] == 'x' {
		digits, base = digits[1:], 16
	}
	if digits == "" || digits[0] == '+' || digits[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, base, 32)
	if err != nil || n > utf8.MaxRune {
		return 0, false
	}
	return rune(n), true
}

func (s *scanner) checkText(b []byte) (string, error) {
	// Eight bytes at a time while they are all printable ASCII (base64 and most text):
	// no byte has its top bit set, and none is below 0x20.
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if w&0x8080808080808080 != 0 || (w-0x2020202020202020)&^w&0x8080808080808080 != 0 {
			break
		}
	}
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return "", s.errf("illegal character code %U", rune(c))
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return "", s.errf("invalid UTF-8")
		}
		if !(r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return "", s.errf("illegal character code %U", r)
		}
		i += size
	}
	return string(b), nil
}

// normalizeNewlines turns \r\n and lone \r into \n (XML 1.0 §2.11).
func normalizeNewlines(b []byte) []byte {
	if bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\r' {
			out = append(out, '\n')
			if i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
			continue
		}
		out = append(out, b[i])
	}
	return out
}
