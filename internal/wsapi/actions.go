package wsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/transport"
)

// restPrefix is where the REST API's paths are (restapi.Prefix; the REST handler
// serves nothing else).
const restPrefix = "/api/rest"

// route is the REST request an action stands for.
type route struct {
	method string
	// path is under restPrefix; {deviceId}, {notificationId} and {commandId} are taken
	// from the message's fields of those names.
	path string
	// body names the field sent as the request's body; "." sends the message's other
	// fields as one object (the login actions). The fields left over become query
	// parameters (filters, take, skip, sortField...), so that a filter REST refuses is
	// refused here too.
	body string
	// reply names the field the REST answer goes under; "" puts its fields in the reply.
	reply string
}

// routes are the actions answered by the REST API, in DeviceHive's names. The others
// (authenticate, the subscriptions) are the socket's own.
var routes = map[string]route{
	"server/info":         {http.MethodGet, "/info", "", "info"},
	"user/getCurrent":     {http.MethodGet, "/user/current", "", "current"},
	"token":               {http.MethodPost, "/token", ".", ""},
	"token/refresh":       {http.MethodPost, "/token/refresh", ".", ""},
	"token/create":        {http.MethodPost, "/token/create", "payload", ""},
	"device/get":          {http.MethodGet, "/device/{deviceId}", "", "device"},
	"device/list":         {http.MethodGet, "/device", "", "devices"},
	"device/save":         {http.MethodPut, "/device/{deviceId}", "device", ""},
	"device/delete":       {http.MethodDelete, "/device/{deviceId}", "", ""},
	"notification/insert": {http.MethodPost, "/device/{deviceId}/notification", "notification", "notification"},
	"notification/get":    {http.MethodGet, "/device/{deviceId}/notification/{notificationId}", "", "notification"},
	"notification/list":   {http.MethodGet, "/device/{deviceId}/notification", "", "notifications"},
	"command/insert":      {http.MethodPost, "/device/{deviceId}/command", "command", "command"},
	"command/get":         {http.MethodGet, "/device/{deviceId}/command/{commandId}", "", "command"},
	"command/list":        {http.MethodGet, "/device/{deviceId}/command", "", "commands"},
	"command/update":      {http.MethodPut, "/device/{deviceId}/command/{commandId}", "command", ""},
	"network/list":        {http.MethodGet, "/network", "", "networks"},
	"network/get":         {http.MethodGet, "/network/{networkId}", "", "network"},
	"network/insert":      {http.MethodPost, "/network", "network", "network"},
	"network/delete":      {http.MethodDelete, "/network/{networkId}", "", ""},
	"devicetype/list":     {http.MethodGet, "/devicetype", "", "deviceTypes"},
	"devicetype/get":      {http.MethodGet, "/devicetype/{deviceTypeId}", "", "deviceType"},
	"devicetype/insert":   {http.MethodPost, "/devicetype", "deviceType", "deviceType"},
	"devicetype/delete":   {http.MethodDelete, "/devicetype/{deviceTypeId}", "", ""},
}

// Actions are every action the API answers, for errors and docs.
func Actions() []string {
	out := []string{"authenticate", "notification/subscribe", "notification/unsubscribe", "command/subscribe", "command/unsubscribe"}
	for a := range routes {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// errNotObject and errNoAction are the refusals of a message that is no request.
var (
	errNotObject = errors.New(`a message is a JSON object: {"action": "...", "requestId": ..., ...}`)
	errNoAction  = errors.New(`the message names no action ("action": "device/get", ...)`)
)

// parseMessage splits a client's message into its action, its requestId (raw, echoed
// as it came) and its other fields.
func parseMessage(data []byte) (action string, reqID json.RawMessage, fields map[string]json.RawMessage, err error) {
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return "", nil, nil, errNotObject
	}
	reqID = fields["requestId"]
	if json.Unmarshal(fields["action"], &action) != nil || action == "" {
		return "", reqID, nil, errNoAction
	}
	delete(fields, "action")
	delete(fields, "requestId")
	return action, reqID, fields, nil
}

// handle runs one message of the client.
func (so *socket) handle(data []byte) {
	action, reqID, msg, err := parseMessage(data)
	if err != nil {
		so.refuse("", reqID, http.StatusBadRequest, err.Error())
		return
	}
	switch action {
	case "authenticate":
		so.authenticate(reqID, msg)
	case "notification/subscribe":
		so.subscribe(action, reqID, msg, transport.FollowNotifications)
	case "command/subscribe":
		so.subscribe(action, reqID, msg, transport.FollowCommands)
	case "notification/unsubscribe", "command/unsubscribe":
		so.unsubscribe(action, reqID, msg)
	default:
		rt, ok := routes[action]
		if !ok {
			so.s.metrics.actions.WithLabelValues("unknown").Inc()
			so.refuse(action, reqID, http.StatusBadRequest, fmt.Sprintf("unknown action %q: this hub answers %s", trimTo(action, 60), strings.Join(Actions(), ", ")))
			return
		}
		so.viaREST(action, reqID, rt, msg)
		return
	}
	so.s.metrics.actions.WithLabelValues(action).Inc()
}

// authenticate makes the token's caller the socket's: its later actions run as that
// caller, with its token.
func (so *socket) authenticate(reqID json.RawMessage, msg map[string]json.RawMessage) {
	var tok string
	if json.Unmarshal(msg["token"], &tok) != nil || tok == "" {
		so.refuse("authenticate", reqID, http.StatusBadRequest, "authenticate needs \"token\": an access token (from the action \"token\" or POST "+restPrefix+"/token)")
		return
	}
	c, err := so.s.rest.Authenticate(so.base, tok)
	if err != nil {
		so.refuseErr("authenticate", reqID, err)
		return
	}
	if why := so.setCaller(c); why != "" {
		so.refuse("authenticate", reqID, http.StatusTooManyRequests, why)
		return
	}
	so.conn.SetReadDeadline(time.Now().Add(2 * so.s.cfg.PingInterval))
	so.answer("authenticate", reqID, nil)
}

// viaREST runs the action as its REST request and answers with what REST answered.
func (so *socket) viaREST(action string, reqID json.RawMessage, rt route, msg map[string]json.RawMessage) {
	so.s.metrics.actions.WithLabelValues(action).Inc()
	r, err := so.restRequest(rt, msg)
	if err != nil {
		so.refuse(action, reqID, http.StatusBadRequest, err.Error())
		return
	}
	rec := &recorder{}
	so.s.rest.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 300 {
		so.refuse(action, reqID, rec.status, rec.message())
		return
	}
	body := rec.body.Bytes()
	if rt.reply != "" {
		if len(bytes.TrimSpace(body)) == 0 {
			body = []byte("null")
		}
		key, _ := json.Marshal(rt.reply)
		body = slices.Concat([]byte("{"), key, []byte(":"), bytes.TrimSpace(body), []byte("}"))
	}
	so.answer(action, reqID, body)
}

// restRequest builds the REST request rt stands for from msg's fields, carrying the
// socket's context, address and token.
func (so *socket) restRequest(rt route, msg map[string]json.RawMessage) (*http.Request, error) {
	caller := so.who()
	own := ""
	if caller != nil {
		own = caller.Device()
	}
	path, err := fillPath(rt.path, msg, own)
	if err != nil {
		return nil, err
	}
	var body []byte
	switch rt.body {
	case "":
	case ".":
		body, _ = json.Marshal(msg)
		clear(msg)
	default:
		body = msg[rt.body]
		delete(msg, rt.body)
		if len(body) == 0 {
			return nil, fmt.Errorf("the action needs %q: a JSON object", rt.body)
		}
	}
	q, err := queryOf(msg)
	if err != nil {
		return nil, err
	}
	r := so.base.Clone(so.ctx)
	r.Method, r.RequestURI, r.Pattern = rt.method, "", ""
	r.URL = &url.URL{Path: restPrefix + path, RawQuery: q.Encode()}
	r.Header = http.Header{"Content-Type": {"application/json"}}
	if caller != nil && caller.Token() != "" {
		r.Header.Set("Authorization", "Bearer "+caller.Token())
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return r, nil
}

// fillPath puts the message's ids into path ({deviceId}: own, the caller's device, when
// it names none).
func fillPath(path string, msg map[string]json.RawMessage, own string) (string, error) {
	for {
		i := strings.IndexByte(path, '{')
		if i < 0 {
			return path, nil
		}
		j := strings.IndexByte(path[i:], '}') + i
		key := path[i+1 : j]
		v, ok, err := scalar(msg[key])
		delete(msg, key)
		switch {
		case err != nil:
			return "", fmt.Errorf("%s: %w", key, err)
		case !ok && key == "deviceId" && own != "":
			v = own
		case !ok || v == "":
			return "", fmt.Errorf("the action needs %q", key)
		}
		path = path[:i] + url.PathEscape(v) + path[j+1:]
	}
}

// queryOf turns the message's remaining fields into query parameters: strings, numbers
// and booleans as they are, lists comma-joined (names, deviceIds), null left out.
func queryOf(msg map[string]json.RawMessage) (url.Values, error) {
	q := url.Values{}
	for k, raw := range msg {
		if v, ok, err := scalar(raw); err == nil {
			if ok {
				q.Set(k, v)
			}
			continue
		}
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return nil, fmt.Errorf("%s: want a string, a number, true or false, or a list of them", trimTo(k, 60))
		}
		var parts []string
		for _, e := range list {
			v, ok, err := scalar(e)
			if err != nil {
				return nil, fmt.Errorf("%s: want a list of strings or numbers", trimTo(k, 60))
			}
			if ok {
				parts = append(parts, v)
			}
		}
		if len(parts) > 0 {
			q.Set(k, strings.Join(parts, ","))
		}
	}
	return q, nil
}

var errNotScalar = errors.New("want a string or a number")

// scalar reads a JSON string, number or boolean as text; ok is false for null or no
// value.
func scalar(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, errNotScalar
		}
		return s, true, nil
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return "", false, errNotScalar
		}
		return strconv.FormatBool(b), true, nil
	case '[', '{':
		return "", false, errNotScalar
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", false, errNotScalar
	}
	return n.String(), true, nil
}

// refuseErr answers err: an *APIError as its code and message, anything else as 500.
func (so *socket) refuseErr(action string, reqID json.RawMessage, err error) {
	var ae *transport.APIError
	if errors.As(err, &ae) {
		so.refuse(action, reqID, ae.Code, ae.Message)
		return
	}
	so.s.log.Error("websocket action failed", "action", action, "err", err)
	so.refuse(action, reqID, http.StatusInternalServerError, "the hub failed to answer; see its log")
}

// recorder keeps the REST answer to an action.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header {
	if r.h == nil {
		r.h = http.Header{}
	}
	return r.h
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// message is a refusal's message: DeviceHive's {"error": N, "message": "..."}, or the
// status text.
func (r *recorder) message() string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(r.body.Bytes(), &e) == nil && e.Message != "" {
		return e.Message
	}
	if t := strings.TrimSpace(r.body.String()); t != "" && len(t) < 300 {
		return t
	}
	return http.StatusText(r.status)
}

func trimTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
