package soap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/iotsafe/iotsafe/internal/wssec"
)

// Client is the device side: it seals notifications, posts them and opens the answers.
type Client struct {
	URL    string
	HTTP   *http.Client
	Key    wssec.Key
	Suite  *wssec.Suite
	Format wssec.Format
	recv   *wssec.Receiver
	ring   *wssec.Keyring
}

// NewClient is a client for the endpoint at url.
func NewClient(url string, hc *http.Client, k wssec.Key, s *wssec.Suite, f wssec.Format) *Client {
	c := &Client{URL: url, HTTP: hc, Key: k, Suite: s, Format: f, ring: wssec.NewKeyring(4)}
	c.recv = &wssec.Receiver{Policy: wssec.Only(s), Replay: wssec.NewReplay(0, 0), Keyring: c.ring,
		Key: func(id string) (wssec.Key, bool) { return k, id == k.ID }}
	return c
}

// Exchange is one message and its answer, with what went over HTTP.
type Exchange struct {
	Ack
	MessageID            string
	RequestBytes, Answer int // the SOAP envelopes' sizes
	Sealed               []byte
}

// Fault is a SOAP fault the hub answered.
type Fault struct {
	Status          int
	Subcode, Reason string
}

func (f *Fault) Error() string {
	if f.Subcode != "" {
		return fmt.Sprintf("the hub refused the message (%d, %s): %s", f.Status, f.Subcode, f.Reason)
	}
	return fmt.Sprintf("the hub refused the message (%d): %s", f.Status, f.Reason)
}

// Notify sends one notification (its payload from Notification) and checks the answer.
func (c *Client) Notify(ctx context.Context, payload []byte) (Exchange, error) {
	m := wssec.Message{To: c.URL, Action: ActionNotify, MessageID: wssec.NewMessageID(), Created: time.Now(), Body: payload}
	sealed, err := c.ring.Seal(c.Format, m, c.Suite, c.Key)
	if err != nil {
		return Exchange{}, err
	}
	return c.Post(ctx, m.MessageID, sealed)
}

// Post sends an already sealed message and checks the answer relates to messageID.
func (c *Client) Post(ctx context.Context, messageID string, sealed []byte) (Exchange, error) {
	x := Exchange{MessageID: messageID, RequestBytes: len(sealed), Sealed: sealed}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(sealed))
	if err != nil {
		return x, err
	}
	req.Header.Set("Content-Type", ContentType)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return x, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return x, err
	}
	x.Answer = len(body)
	if resp.StatusCode != http.StatusOK {
		return x, readFault(resp.StatusCode, body)
	}
	o, err := c.recv.Open(body)
	if err != nil {
		return x, fmt.Errorf("the hub's answer does not verify: %w", err)
	}
	if o.RelatesTo != messageID || o.Action != ActionNotifyResponse {
		return x, errors.New("the hub's answer is not to this message")
	}
	x.Ack, err = readAck(o.Payload)
	return x, err
}

// readFault reads a SOAP fault's subcode and reason (or says the answer was not one).
func readFault(status int, body []byte) error {
	f := &Fault{Status: status}
	if status == http.StatusNotFound {
		f.Reason = "no SOAP endpoint there (a hub serves one with soap: {enabled: true} in hub.yaml)"
		return f
	}
	root, err := wssec.Parse(body, wssec.Limits{})
	if err != nil {
		f.Reason = fmt.Sprintf("not a SOAP answer: %.200s", body)
		return f
	}
	var walk func(n *wssec.Node)
	walk = func(n *wssec.Node) {
		switch {
		case n.Is(wssec.SOAPNS, "Subcode"):
			if v := n.Child(wssec.SOAPNS, "Value"); v != nil {
				f.Subcode = v.Content()
			}
		case n.Is(wssec.SOAPNS, "Text"):
			f.Reason = n.Content()
		}
		for _, k := range n.Elements() {
			walk(k)
		}
	}
	walk(root)
	return f
}
