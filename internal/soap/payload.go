package soap

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/iotsafe/iotsafe/internal/wssec"
)

// NS is the namespace of the device message payload and the hub's answers.
const NS = "urn:iotsafe:soap:1"

// Actions (WS-Addressing) the endpoint answers.
const (
	ActionNotify         = NS + "/Notify"
	ActionNotifyResponse = NS + "/NotifyResponse"
)

// ErrPayload is a payload that is not a notification.
var ErrPayload = errors.New("payload is not a notification")

// Notification builds the payload of one notification: a Notification element named
// name, holding text (stored as {"value": text}) or one element per parameter (stored as
// a JSON object of strings; a name given more than once becomes a list).
func Notification(name, text string, params [][2]string) []byte {
	var b strings.Builder
	b.WriteString(`<n:Notification xmlns:n="` + NS + `" name="`)
	xmlEscape(&b, name)
	b.WriteString(`">`)
	if len(params) == 0 {
		xmlEscape(&b, text)
	}
	for _, p := range params {
		b.WriteString("<n:" + p[0] + ">")
		xmlEscape(&b, p[1])
		b.WriteString("</n:" + p[0] + ">")
	}
	b.WriteString("</n:Notification>")
	return []byte(b.String())
}

func xmlEscape(b *strings.Builder, s string) {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	r.WriteString(b, s)
}

// ValidParamName reports whether s can be a parameter element's name.
func ValidParamName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c == '-' || c == '.' || c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// toNotification reads a payload: one Notification element with a name, holding text or
// leaf elements.
func toNotification(payload []*wssec.Node) (string, json.RawMessage, error) {
	var n *wssec.Node
	for _, k := range payload {
		switch {
		case k.IsText && strings.TrimSpace(k.Text) == "":
		case n == nil && k.Is(NS, "Notification"):
			n = k
		default:
			return "", nil, fmt.Errorf("%w: the Body must hold one {%s}Notification", ErrPayload, NS)
		}
	}
	if n == nil {
		return "", nil, fmt.Errorf("%w: the Body holds no {%s}Notification", ErrPayload, NS)
	}
	name, _ := n.Attr("", "name")
	if strings.TrimSpace(name) == "" {
		return "", nil, fmt.Errorf("%w: Notification without a name attribute", ErrPayload)
	}
	kids := n.Elements()
	if len(kids) == 0 {
		p, _ := json.Marshal(map[string]string{"value": n.Content()})
		return name, p, nil
	}
	params := map[string][]string{}
	for _, k := range kids {
		if len(k.Elements()) != 0 {
			return "", nil, fmt.Errorf("%w: parameter %s has element content (parameters are text)", ErrPayload, k.Local)
		}
		params[k.Local] = append(params[k.Local], k.Content())
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	obj := make(map[string]any, len(params))
	for _, k := range keys {
		if v := params[k]; len(v) == 1 {
			obj[k] = v[0]
		} else {
			obj[k] = v
		}
	}
	p, err := json.Marshal(obj)
	return name, p, err
}

// AckPayload is the hub's answer payload: the stored notification's id and time.
func AckPayload(id int64, ts string) []byte {
	return []byte(fmt.Sprintf(`<n:NotificationAck xmlns:n="%s" id="%d" timestamp="%s"/>`, NS, id, ts))
}

// Ack is what the hub answered: the stored notification's id and timestamp.
type Ack struct {
	ID        int64
	Timestamp string
}

func readAck(payload []*wssec.Node) (Ack, error) {
	for _, k := range payload {
		if k.Is(NS, "NotificationAck") {
			var a Ack
			id, _ := k.Attr("", "id")
			if _, err := fmt.Sscan(id, &a.ID); err != nil {
				return Ack{}, fmt.Errorf("the hub's answer has no notification id")
			}
			a.Timestamp, _ = k.Attr("", "timestamp")
			return a, nil
		}
	}
	return Ack{}, fmt.Errorf("the hub's answer holds no NotificationAck")
}
