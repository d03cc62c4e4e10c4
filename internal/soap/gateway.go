package soap

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/iotsafe/iotsafe/internal/wssec"
)

// Gateway lets SOAP tooling that knows nothing of compact WS-Security (a zeep or JAX-WS
// client generated from the WSDL) send notifications: it takes a plain SOAP 1.2
// envelope whose Body holds a Notification, seals it as the device with Client, posts it
// to the hub, checks the sealed answer, and answers a plain envelope holding the
// NotificationAck (or the hub's fault). It holds the device's key, so whoever reaches it
// speaks as the device: it listens on loopback only ('iotsafe soap gateway').
type Gateway struct {
	Client *Client
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeFault(w, http.StatusMethodNotAllowed, "s:Sender", "", "POST a SOAP 1.2 envelope holding a Notification")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || (mt != "application/soap+xml" && mt != "text/xml") {
		writeFault(w, http.StatusUnsupportedMediaType, "s:Sender", "", "POST a SOAP 1.2 envelope as application/soap+xml")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(wssec.DefaultLimits.MaxBytes)+1))
	if err != nil || len(body) > wssec.DefaultLimits.MaxBytes {
		writeFault(w, http.StatusRequestEntityTooLarge, "s:Sender", "", fmt.Sprintf("message larger than %d bytes", wssec.DefaultLimits.MaxBytes))
		return
	}
	payload, err := plainNotification(body)
	if err != nil {
		writeFault(w, http.StatusBadRequest, "s:Sender", "", err.Error())
		return
	}
	x, err := g.Client.Notify(r.Context(), payload)
	var fault *Fault
	switch {
	case errors.As(err, &fault):
		writeFault(w, fault.Status, "s:Sender", fault.Subcode, "the hub: "+fault.Reason)
		return
	case err != nil:
		writeFault(w, http.StatusBadGateway, "s:Receiver", "", "the hub: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", ContentType)
	fmt.Fprintf(w, `<s:Envelope xmlns:s="%s"><s:Body>%s</s:Body></s:Envelope>`, wssec.SOAPNS, AckPayload(x.ID, x.Timestamp))
}

// plainNotification reads an unsecured SOAP envelope (with the hardened parser and its
// limits) and returns its Notification as the payload a sealed message carries.
func plainNotification(data []byte) ([]byte, error) {
	root, err := wssec.Parse(data, wssec.Limits{})
	if err != nil {
		return nil, err
	}
	if !root.Is(wssec.SOAPNS, "Envelope") {
		return nil, errors.New("not a SOAP 1.2 envelope")
	}
	body := root.Child(wssec.SOAPNS, "Body")
	if body == nil {
		return nil, errors.New("the envelope has no Body")
	}
	name, params, text, err := notificationParts(body.Kids)
	if err != nil {
		return nil, err
	}
	return Notification(name, text, params), nil
}

// notificationParts is a Body's Notification: its name, and its parameters in order or
// its text.
func notificationParts(kids []*wssec.Node) (name string, params [][2]string, text string, err error) {
	var n *wssec.Node
	for _, k := range kids {
		switch {
		case k.IsText && strings.TrimSpace(k.Text) == "":
		case n == nil && k.Is(NS, "Notification"):
			n = k
		default:
			return "", nil, "", fmt.Errorf("%w: the Body must hold one {%s}Notification", ErrPayload, NS)
		}
	}
	if n == nil {
		return "", nil, "", fmt.Errorf("%w: the Body holds no {%s}Notification", ErrPayload, NS)
	}
	name, _ = n.Attr("", "name")
	for _, k := range n.Elements() {
		if !ValidParamName(k.Local) {
			return "", nil, "", fmt.Errorf("%w: %q is not a parameter name", ErrPayload, k.Local)
		}
		params = append(params, [2]string{k.Local, k.Content()})
	}
	if len(params) == 0 {
		text = n.Content()
	}
	return name, params, text, nil
}
