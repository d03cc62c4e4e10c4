package wssec

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Namespaces of the messages. Compact signatures are WS-Discovery's (d:Security, d:Sig);
// the compact encryption header and the record are this project's (c:).
const (
	SOAPNS = "http://www.w3.org/2003/05/soap-envelope"
	WSANS  = "http://www.w3.org/2005/08/addressing"
	WSUNS  = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
	WSDNS  = "http://docs.oasis-open.org/ws-dd/ns/discovery/2009/01"
	CompNS = "urn:iotsafe:wssec:1"
	WSSENS = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
)

// Format is one of the two compact forms.
type Format string

const (
	// CSec is WS Compact Security: a compact signature over the headers and the plain
	// Body, and the Body's content encrypted, named by a compact encryption header.
	CSec Format = "csec"
	// SecRec is WS Security Records: the Body replaced by one record carrying the
	// ciphertext of the payload and its authentication in one run.
	SecRec Format = "secrec"
)

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case CSec, SecRec:
		return Format(s), nil
	}
	return "", fmt.Errorf("wssec: unknown format %q (csec or secrec)", s)
}

// Message is what a SOAP device message says, before sealing and after opening.
type Message struct {
	To, Action, MessageID, RelatesTo string
	Created                          time.Time
	// Body is the Body's content: XML elements (with their namespace declarations) or text.
	Body []byte
}

// TimeLayout is how Created is written.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// Errors a receiver distinguishes; each is a different SOAP fault.
var (
	ErrFormat = errors.New("malformed secured message")
	// ErrClassicForm is a message secured with OASIS WS-Security (a wsse:Security
	// header): the receiver takes the compact forms only, into which a classic message
	// of the supported shape converts (FromClassic, 'iotsafe soap from-classic').
	ErrClassicForm = fmt.Errorf("%w: it carries OASIS WS-Security (wsse:Security); this endpoint takes WS Compact Security or WS Security Records only: convert the message with 'iotsafe soap from-classic' (docs/soap.md, Mapping to classic WS-Security)", ErrFormat)
	ErrUnknownKey  = errors.New("unknown key id")
	ErrExpired     = errors.New("message outside the time window")
	ErrReplay      = errors.New("message id already seen")
	// ErrBusy: the key sent more messages within the window than the receiver
	// remembers for one key; the sender waits, no message is wrong.
	ErrBusy = errors.New("the key's replay window is full")
)

// Opened is a message that verified and decrypted.
type Opened struct {
	Message
	Format Format
	Suite  *Suite
	KeyID  string
	// Payload is the Body's content as parsed (children of the Body element).
	Payload []*Node
}

// Receiver opens messages of either format.
type Receiver struct {
	Policy *Policy
	// Key finds a pre-shared key by its id.
	Key    func(id string) (Key, bool)
	Replay *Replay // nil: no replay window (a lab's one-way checks only)
	// Keyring remembers derived keys (nil: derive for every message).
	Keyring *Keyring
	Limits  Limits
	Now     func() time.Time
}

func (r *Receiver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Open parses, verifies, decrypts and checks freshness, whichever the format.
func (r *Receiver) Open(data []byte) (*Opened, error) {
	env, err := Parse(data, r.Limits)
	if err != nil {
		return nil, err
	}
	e, err := splitEnvelope(env)
	if err != nil {
		return nil, err
	}
	var o *Opened
	if e.body.Child(CompNS, "Record") == nil && e.header.Child(WSDNS, "Security") == nil && e.header.Child(WSSENS, "Security") != nil {
		return nil, ErrClassicForm
	}
	if rec := e.body.Child(CompNS, "Record"); rec != nil {
		o, err = r.openSecRec(e, rec)
	} else {
		o, err = r.openCSec(e)
	}
	if err != nil {
		return nil, err
	}
	if r.Replay != nil {
		if err := r.Replay.Check(o.KeyID, o.MessageID, o.Created, r.now()); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// envelope is a message's parts, checked for shape.
type envelope struct {
	root, header, body *Node
}

func splitEnvelope(root *Node) (*envelope, error) {
	if !root.Is(SOAPNS, "Envelope") {
		return nil, fmt.Errorf("%w: the document is <%s>, not a SOAP 1.2 Envelope", ErrFormat, root.Local)
	}
	e := &envelope{root: root}
	for _, k := range root.Kids {
		switch {
		case k.IsText && strings.TrimSpace(k.Text) == "":
		case k.Is(SOAPNS, "Header") && e.header == nil && e.body == nil:
			e.header = k
		case k.Is(SOAPNS, "Body") && e.body == nil:
			e.body = k
		default:
			return nil, fmt.Errorf("%w: the Envelope holds something other than one Header and one Body", ErrFormat)
		}
	}
	if e.header == nil || e.body == nil {
		return nil, fmt.Errorf("%w: a secured message needs a Header and a Body", ErrFormat)
	}
	return e, nil
}

// addressing reads the WS-Addressing headers into m; each at most once.
func addressing(header *Node, m *Message) error {
	seen := map[string]bool{}
	for _, k := range header.Elements() {
		if k.Space() != WSANS {
			continue
		}
		if seen[k.Local] {
			return fmt.Errorf("%w: header %s repeated", ErrFormat, k.Local)
		}
		seen[k.Local] = true
		if len(k.Elements()) != 0 {
			return fmt.Errorf("%w: header %s has element content", ErrFormat, k.Local)
		}
		v := strings.TrimSpace(k.Content())
		switch k.Local {
		case "To":
			m.To = v
		case "Action":
			m.Action = v
		case "MessageID":
			m.MessageID = v
		case "RelatesTo":
			m.RelatesTo = v
		}
	}
	if m.MessageID == "" || m.Action == "" {
		return fmt.Errorf("%w: wsa:MessageID and wsa:Action are required", ErrFormat)
	}
	return nil
}

func parseCreated(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: creation time %q is not an RFC 3339 time", ErrFormat, trim(s))
	}
	return t, nil
}

// addressingHeaders are the wsa: headers of m, each with the given wsu:Id when ids is set.
func addressingHeaders(m Message, ids bool) []*Node {
	var out []*Node
	add := func(local, id, v string) {
		if v == "" {
			return
		}
		n := el("a", local)
		if ids {
			n.Attrs = append(n.Attrs, Attr{"u", "Id", id})
		}
		out = append(out, n.add(text(v)))
	}
	add("To", "to", m.To)
	add("Action", "ac", m.Action)
	add("MessageID", "id", m.MessageID)
	add("RelatesTo", "re", m.RelatesTo)
	return out
}

func checkMessage(m Message) error {
	if m.MessageID == "" || m.Action == "" {
		return errors.New("wssec: a message needs a MessageID and an Action")
	}
	if m.Created.IsZero() {
		return errors.New("wssec: a message needs its creation time")
	}
	return nil
}

func trim(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// NewMessageID is a random urn:uuid (version 4).
func NewMessageID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// String is the key as iotsafe device soap-key rotate and show print it: ID:BASE64.
func (k Key) String() string { return k.ID + ":" + b64.EncodeToString(k.Secret) }

// ParseKey reads a key as Key.String writes it.
func ParseKey(s string) (Key, error) {
	id, secret, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || id == "" {
		return Key{}, errors.New("wssec: a key is KEYID:BASE64 (as iotsafe device soap-key rotate and show print it)")
	}
	raw, err := b64.DecodeString(secret)
	if err != nil || len(raw) != KeySize {
		return Key{}, fmt.Errorf("wssec: key %s: want %d bytes of base64", id, KeySize)
	}
	return Key{ID: id, Secret: raw}, nil
}

// Plain writes m as an unsecured SOAP 1.2 envelope (WS-Addressing headers and the Body):
// the baseline the paper's sizes and round trips compare against.
func Plain(m Message) ([]byte, error) {
	if err := checkMessage(m); err != nil {
		return nil, err
	}
	env := el("s", "Envelope", "xmlns:s", SOAPNS, "xmlns:a", WSANS)
	hdr, body := el("s", "Header"), el("s", "Body")
	env.add(hdr, body)
	hdr.add(addressingHeaders(m, false)...)
	kids, err := parseFragment(m.Body, body, Limits{})
	if err != nil {
		return nil, fmt.Errorf("wssec: the payload: %w", err)
	}
	body.replaceKids(kids)
	return env.Marshal(), nil
}

// ReadPlain parses an unsecured envelope: its addressing headers and the Body's content.
func ReadPlain(data []byte, lim Limits) (Message, []*Node, error) {
	root, err := Parse(data, lim)
	if err != nil {
		return Message{}, nil, err
	}
	e, err := splitEnvelope(root)
	if err != nil {
		return Message{}, nil, err
	}
	var m Message
	if err := addressing(e.header, &m); err != nil {
		return Message{}, nil, err
	}
	return m, e.body.Kids, nil
}

// BodySize is the size of the Body element of an envelope (paper 001's table I).
func BodySize(envelope []byte) int {
	root, err := Parse(envelope, Limits{})
	if err != nil {
		return 0
	}
	for _, k := range root.Elements() {
		if k.Is(SOAPNS, "Body") {
			return len(k.Marshal())
		}
	}
	return 0
}
