package soap

import (
	"context"
	_ "embed"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/deviceplain"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/throttle"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// Path is where the endpoint answers on every listener.
const Path = "/soap"

// EventRefused is the audit event of a refused message.
const EventRefused = "soap_refused"

// Config of the endpoint (hub.yaml "soap:").
type Config struct {
	// Enabled turns the endpoint on: on the front door at /soap, and at /soap on the
	// plain listener rest.listen when that is set.
	Enabled bool `yaml:"enabled"`
	// Algorithms are the suites accepted; empty means the modern ones (aes128-gcm,
	// aes256-gcm, chacha20-poly1305).
	Algorithms []string `yaml:"algorithms"`
	// AllowLegacy lets algorithms name the paper's aes128-cbc-sha1 (CBC with SHA-1).
	AllowLegacy bool `yaml:"allow_legacy"`
	// Window is how far a message's time may be from the hub's, and how long its id is
	// remembered against replays; 0 means 5m.
	Window time.Duration `yaml:"window"`
	// MaxBody bounds a request; 0 means 256 KiB.
	MaxBody bytesize.Size `yaml:"max_body"`
	// MaxIDs bounds the message ids remembered in the window for one key (one device):
	// past it that key's new messages wait (503) until ids expire; 0 means 10000.
	MaxIDs int `yaml:"max_ids"`
}

// Validate checks the config and returns the legacy suites it lets in ("soap: NAME",
// as the hub's other sections report theirs, for the start-up warning).
func (c *Config) Validate() ([]string, error) {
	if c.Window < 0 || c.MaxBody < 0 || c.MaxIDs < 0 {
		return nil, errors.New("soap: window, max_body and max_ids must not be negative")
	}
	if c.Window > time.Hour {
		return nil, fmt.Errorf("soap.window %s: at most 1h (ids are remembered that long)", c.Window)
	}
	if _, err := wssec.NewPolicy(c.Algorithms, c.AllowLegacy); err != nil {
		return nil, fmt.Errorf("soap.algorithms: %w", err)
	}
	var weak []string
	for _, a := range c.Algorithms {
		if s, _ := wssec.SuiteByName(a); s != nil && s.Legacy {
			weak = append(weak, "soap: "+a)
		}
	}
	return weak, nil
}

func (c *Config) applyDefaults() {
	if c.Window <= 0 {
		c.Window = wssec.DefaultWindow
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 256 << 10
	}
}

// Store is where notifications go.
type Store interface {
	// AppendOnce stores unless the key was used (telemetry.ErrDuplicate): a message id
	// is then refused on this hub after a restart and on every hub sharing the store.
	AppendOnce(ctx context.Context, once telemetry.Once, items ...telemetry.Notification) ([]telemetry.Notification, error)
}

// Auditor records refusals.
type Auditor interface {
	AddEvent(ctx context.Context, e registry.Event) error
}

// Endpoint is the handler.
type Endpoint struct {
	cfg    Config
	dir    *devicedir.Directory
	store  Store
	audit  Auditor
	policy *wssec.Policy
	replay *wssec.Replay
	// ring remembers derived keys; it starts again whenever the directory does, so a
	// replaced or removed key's material does not linger.
	ring     *wssec.Keyring
	ringSnap atomic.Pointer[devicedir.Snapshot]
	log      *slog.Logger
	gate     *throttle.LogGate
	// Violation counts a breach against a device's profile (the hub's one counter).
	Violation func(device, detail, remote string)
}

// New builds the endpoint over the hub's device directory and telemetry store.
func New(cfg Config, dir *devicedir.Directory, store Store, audit Auditor, log *slog.Logger) (*Endpoint, error) {
	cfg.applyDefaults()
	p, err := wssec.NewPolicy(cfg.Algorithms, cfg.AllowLegacy)
	if err != nil {
		return nil, err
	}
	return &Endpoint{cfg: cfg, dir: dir, store: store, audit: audit, policy: p, log: log,
		replay: wssec.NewReplay(cfg.Window, cfg.MaxIDs), ring: wssec.NewKeyring(0), gate: throttle.NewLogGate(time.Minute)}, nil
}

// Algorithms are the accepted suites.
func (e *Endpoint) Algorithms() []string { return e.policy.Names() }

// request is what is known about one request while it is handled.
type request struct {
	r      *http.Request
	remote netip.Addr
	// via is the device the connection proves (on the plain listener; "" elsewhere).
	via string
	// keyDevice is the device the message's key belongs to, once looked up.
	keyDevice string
	revoked   bool
}

// ServeHTTP answers one message: read (readBody), open and check it (open), store it
// once (storeOnce), and answer with a sealed acknowledgement (answer).
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.RawQuery == "wsdl" {
		serveWSDL(w, r)
		return
	}
	q := &request{r: r}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		q.remote = ap.Addr().Unmap()
	}
	snap := e.dir.Load()
	if old := e.ringSnap.Swap(snap); old != snap {
		e.ring.Reset()
	}
	// On the hub's plain listener the connection may prove its device (its SSH session):
	// a message there must be sealed with that device's key.
	if st, _, ok := deviceplain.Device(r, snap); ok {
		q.via = st.Name
	}
	body, ok := e.readBody(w, r)
	if !ok {
		return
	}
	o, ok := e.open(w, q, snap, body)
	if !ok {
		return
	}
	n, ok := e.storeOnce(w, q, o)
	if !ok {
		return
	}
	e.answer(w, q, snap, o, n)
}

// wsdl describes the endpoint for SOAP tooling (issue 55.7); ADDRESS becomes the URL it
// was read at.
//
//go:embed iotsafe.wsdl
var wsdl string

// serveWSDL answers GET /soap?wsdl. The address is the one the client reached (scheme of
// the listener, the Host it named), as addressedHere checks a message's wsa:To.
func serveWSDL(w http.ResponseWriter, r *http.Request) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	var here strings.Builder
	xml.EscapeText(&here, []byte(scheme+"://"+r.Host+Path))
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	io.WriteString(w, strings.Replace(wsdl, `location="ADDRESS"`, `location="`+here.String()+`"`, 1))
}

// readBody reads a POSTed message within soap.max_body, or answers why not.
func (e *Endpoint) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeFault(w, http.StatusMethodNotAllowed, "s:Sender", "", "POST a SOAP 1.2 envelope (application/soap+xml); GET ?wsdl for the service description")
		return nil, false
	}
	// Only SOAP: application/soap+xml (1.2), or text/xml as SOAP 1.1 clients send it.
	// The message is sealed whatever the header says; the answer tells a client that
	// posts a form or JSON here what it did (issue 55.8).
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || (mt != "application/soap+xml" && mt != "text/xml") {
		writeFault(w, http.StatusUnsupportedMediaType, "s:Sender", "", fmt.Sprintf("Content-Type %q is not SOAP: POST a SOAP 1.2 envelope as application/soap+xml", r.Header.Get("Content-Type")))
		return nil, false
	}
	tooLarge := fmt.Sprintf("message larger than %d bytes", e.cfg.MaxBody)
	if r.ContentLength > int64(e.cfg.MaxBody) {
		writeFault(w, http.StatusRequestEntityTooLarge, "s:Sender", "", tooLarge)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(e.cfg.MaxBody)))
	if err != nil {
		writeFault(w, http.StatusRequestEntityTooLarge, "s:Sender", "", tooLarge)
		return nil, false
	}
	return body, true
}

// open verifies and decrypts a message and checks who sent it, where to and what for;
// what fails is refused (and a message not acted on leaves the replay window).
func (e *Endpoint) open(w http.ResponseWriter, q *request, snap *devicedir.Snapshot, body []byte) (*wssec.Opened, bool) {
	recv := &wssec.Receiver{Policy: e.policy, Replay: e.replay, Keyring: e.ring, Key: func(id string) (wssec.Key, bool) {
		k, st, ok := snap.SOAPKey(id)
		if !ok {
			return wssec.Key{}, false
		}
		q.keyDevice = st.Name
		if st.Revoked {
			q.revoked = true
			return wssec.Key{}, false
		}
		return wssec.Key{ID: k.KeyID, Secret: k.Secret}, true
	}}
	o, err := recv.Open(body)
	if err != nil {
		e.refuse(w, q, err)
		return nil, false
	}
	if q.via != "" && q.via != q.keyDevice {
		e.refuse(w, q, fmt.Errorf("%w: the message is sealed with %s's key but comes over %s's SSH session", wssec.ErrUnknownKey, q.keyDevice, q.via))
		return nil, false
	}
	if err := addressedHere(o.To, q.r); err != nil {
		// Not stored: the id may still be used where the message was meant to go.
		e.replay.Forget(o.KeyID, o.MessageID)
		e.refuse(w, q, err)
		return nil, false
	}
	if o.Action != ActionNotify {
		e.replay.Forget(o.KeyID, o.MessageID)
		writeFault(w, http.StatusBadRequest, "s:Sender", "wsa:ActionNotSupported", fmt.Sprintf("action %q is not supported here (%s)", trim(o.Action), ActionNotify))
		return nil, false
	}
	return o, true
}

// storeOnce stores the message's notification once (the store claims its id too: across
// restarts and the hubs sharing the store it is stored once; the window answers most
// replays without a write), or answers why not.
func (e *Endpoint) storeOnce(w http.ResponseWriter, q *request, o *wssec.Opened) (telemetry.Notification, bool) {
	name, params, err := toNotification(o.Payload)
	if err != nil {
		e.replay.Forget(o.KeyID, o.MessageID)
		writeFault(w, http.StatusBadRequest, "s:Sender", "", err.Error())
		return telemetry.Notification{}, false
	}
	created := o.Created
	once := telemetry.Once{Key: "soap\x00" + o.KeyID + "\x00" + o.MessageID, Until: created.Add(e.cfg.Window)}
	got, err := e.store.AppendOnce(q.r.Context(), once, telemetry.Notification{Device: q.keyDevice, Name: name, Parameters: params, DeviceTime: &created})
	if err != nil && !errors.Is(err, telemetry.ErrInvalid) && !errors.Is(err, telemetry.ErrDuplicate) {
		// Not stored: the device may send this very message again.
		e.replay.Forget(o.KeyID, o.MessageID)
	}
	switch {
	case err == nil:
		return got[0], true
	case errors.Is(err, telemetry.ErrDuplicate):
		e.refuse(w, q, fmt.Errorf("%w: %s (stored before)", wssec.ErrReplay, trim(o.MessageID)))
	case errors.Is(err, telemetry.ErrRateLimited):
		w.Header().Set("Retry-After", "5")
		writeFault(w, http.StatusTooManyRequests, "s:Sender", "", strings.TrimPrefix(err.Error(), "telemetry: "))
	case errors.Is(err, telemetry.ErrDiskFull):
		w.Header().Set("Retry-After", "60")
		writeFault(w, http.StatusServiceUnavailable, "s:Receiver", "", "the hub's disk is nearly full: nothing was stored; retry later")
	case errors.Is(err, telemetry.ErrOverloaded):
		w.Header().Set("Retry-After", "1")
		writeFault(w, http.StatusServiceUnavailable, "s:Receiver", "", "the hub is storing as fast as it can; retry after 1 s")
	case errors.Is(err, telemetry.ErrInvalid):
		writeFault(w, http.StatusBadRequest, "s:Sender", "", err.Error())
	default:
		e.log.Error("storing a SOAP notification failed", "device", q.keyDevice, "err", err)
		writeFault(w, http.StatusInternalServerError, "s:Receiver", "", "the notification could not be stored")
	}
	return telemetry.Notification{}, false
}

// answer sends the sealed acknowledgement of a stored notification.
func (e *Endpoint) answer(w http.ResponseWriter, q *request, snap *devicedir.Snapshot, o *wssec.Opened, n telemetry.Notification) {
	answer := wssec.Message{Action: ActionNotifyResponse, MessageID: wssec.NewMessageID(), RelatesTo: o.MessageID, Created: time.Now(),
		Body: AckPayload(n.ID, telemetry.FormatTime(n.Timestamp))}
	k, _, _ := snap.SOAPKey(o.KeyID)
	out, err := e.ring.Seal(o.Format, answer, o.Suite, wssec.Key{ID: k.KeyID, Secret: k.Secret})
	if err != nil {
		e.log.Error("sealing a SOAP answer failed", "device", q.keyDevice, "err", err)
		writeFault(w, http.StatusInternalServerError, "s:Receiver", "", "the answer could not be sealed")
		return
	}
	w.Header().Set("Content-Type", ContentType)
	w.Write(out)
}

// errNotHere: a message addressed (its signed wsa:To) to another endpoint.
var errNotHere = errors.New("message addressed elsewhere")

// addressedHere checks a message's signed wsa:To against the URL the request reached:
// the scheme of the listener, the host the client named, the endpoint's path. A message
// sealed for another service cannot be replayed here.
func addressedHere(to string, r *http.Request) error {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	here := scheme + "://" + r.Host + Path
	u, err := url.Parse(to)
	if to == "" || err != nil || !strings.EqualFold(u.Scheme, scheme) || u.Path != Path || u.RawQuery != "" ||
		canonicalHost(u.Host, scheme) != canonicalHost(r.Host, scheme) {
		return fmt.Errorf("%w: the message is addressed to %q, not to this endpoint (%s)", errNotHere, trim(to), here)
	}
	return nil
}

// canonicalHost is host:port in lower case, with the scheme's default port written out.
func canonicalHost(host, scheme string) string {
	host = strings.ToLower(host)
	if _, _, err := net.SplitHostPort(host); err != nil {
		port := "80"
		if scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(strings.Trim(host, "[]"), port)
	}
	return host
}

// ContentType of SOAP 1.2 over HTTP.
const ContentType = "application/soap+xml; charset=utf-8"

// refuse answers a message that failed its checks: a fault, an audit event (at most one
// a minute per address and reason) and, where the sender is known, a violation.
func (e *Endpoint) refuse(w http.ResponseWriter, q *request, err error) {
	status, sub, reason := http.StatusBadRequest, "wsse:InvalidSecurity", err.Error()
	switch {
	case q.revoked:
		sub, reason = "wsse:FailedAuthentication", fmt.Sprintf("device %s is revoked", q.keyDevice)
	case errors.Is(err, wssec.ErrHostileXML), errors.Is(err, wssec.ErrFormat):
		sub = "wsse:InvalidSecurity"
	case errors.Is(err, wssec.ErrAlgorithm):
		sub = "wsse:UnsupportedAlgorithm"
	case errors.Is(err, wssec.ErrUnknownKey):
		sub = "wsse:SecurityTokenUnavailable"
	case errors.Is(err, wssec.ErrAuth):
		sub = "wsse:FailedCheck"
	case errors.Is(err, wssec.ErrExpired):
		sub = "wsu:MessageExpired"
	case errors.Is(err, wssec.ErrReplay):
		sub = "wsse:InvalidSecurity"
	case errors.Is(err, wssec.ErrBusy):
		status, sub = http.StatusServiceUnavailable, ""
		w.Header().Set("Retry-After", "5")
	case errors.Is(err, errNotHere):
		sub = "wsa:DestinationUnreachable"
	default:
		status, sub = http.StatusInternalServerError, ""
	}
	writeFault(w, status, "s:Sender", sub, reason)

	// Who to hold responsible: on the SSH path the session says which device sent it,
	// and a message it could not have sealed right counts against it. A copy of a good
	// message (a replay, one too old, one addressed elsewhere) proves only that someone
	// once held the key, and a full window is no fault of the message: those are audited,
	// never a violation, so whoever holds one captured message cannot run a device into
	// its on_violation policy. Elsewhere anyone can name any key id: refusals are audited
	// under the device the key id names, without a violation.
	device := q.via
	if device == "" {
		device = q.keyDevice
	}
	attributable := q.via != "" && !errors.Is(err, wssec.ErrReplay) && !errors.Is(err, wssec.ErrExpired) &&
		!errors.Is(err, wssec.ErrBusy) && !errors.Is(err, errNotHere)
	detail := "soap: " + reason
	if ok, n := e.gate.Allow(q.remote.String() + "\x00" + sub + "\x00" + device); ok {
		e.log.Warn("SOAP message refused", "event", EventRefused, "device", device, "fault", sub, "reason", reason, "remote", q.remote.String(), "similar_suppressed", n)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), 5*time.Second)
		defer cancel()
		if err := e.audit.AddEvent(ctx, registry.Event{Device: device, Kind: EventRefused, Detail: trim(detail), Remote: q.remote.String()}); err != nil {
			e.log.Error("recording a refused SOAP message failed", "err", err)
		}
	}
	if attributable && !q.revoked && e.Violation != nil {
		e.Violation(device, trim(detail), q.remote.String())
	}
}

// writeFault answers a SOAP 1.2 fault. Faults are not sealed: they are sent when the
// sender's key is unknown or unproven.
func writeFault(w http.ResponseWriter, status int, code, subcode, reason string) {
	var b strings.Builder
	b.WriteString(`<s:Envelope xmlns:s="` + wssec.SOAPNS + `" xmlns:wsse="` + wssec.WSSENS + `" xmlns:wsu="` + wssec.WSUNS + `" xmlns:wsa="` + wssec.WSANS + `">`)
	b.WriteString(`<s:Body><s:Fault><s:Code><s:Value>` + code + `</s:Value>`)
	if subcode != "" {
		b.WriteString(`<s:Subcode><s:Value>` + subcode + `</s:Value></s:Subcode>`)
	}
	b.WriteString(`</s:Code><s:Reason><s:Text xml:lang="en">`)
	xmlEscape(&b, reason)
	b.WriteString(`</s:Text></s:Reason></s:Fault></s:Body></s:Envelope>`)
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(status)
	io.WriteString(w, b.String())
}

func trim(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
