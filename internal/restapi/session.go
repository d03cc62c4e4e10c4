package restapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/iotsafe/iotsafe/internal/transport"
)

// The API as another transport speaks it (transport.DeviceHive): the WebSocket API runs
// each of a socket's actions as the REST request it stands for, and its subscriptions
// as the REST stream and command poll run, so that nothing of identity, rights, limits
// or audit is written twice.

var _ transport.DeviceHive = (*API)(nil)

// Authenticate proves r's caller by token (a JWT access token or an account's API
// token), or with token "" by what r's connection proves (a device on the plain
// listener): what a REST request carrying it would be allowed.
func (a *API) Authenticate(r *http.Request, token string) (transport.DeviceHiveCaller, error) {
	q := r.Clone(r.Context())
	q.Header = http.Header{}
	if token != "" {
		q.Header.Set("Authorization", "Bearer "+token)
	}
	c, code, msg := a.identify(q)
	if code != 0 {
		return nil, &transport.APIError{Code: code, Message: msg}
	}
	return &session{a: a, c: c, token: token, base: r}, nil
}

// AnnounceWebSocket tells /info where the WebSocket API is served (its path on the
// listener a client reached /info on).
func (a *API) AnnounceWebSocket(path string) { a.wsPath.Store(&path) }

// webSocketURL is the WebSocket API's URL on the listener r came in on, or nil.
func (a *API) webSocketURL(r *http.Request) any {
	p := a.wsPath.Load()
	if p == nil {
		return nil
	}
	scheme := "ws"
	if r.TLS != nil {
		scheme = "wss"
	}
	return scheme + "://" + r.Host + *p
}

// session is a caller proved once, for a socket's lifetime.
type session struct {
	a     *API
	c     caller
	token string
	base  *http.Request // the socket's request: its context and remote address
}

func (s *session) String() string { return s.c.String() }
func (s *session) Device() string { return s.c.device }
func (s *session) Token() string  { return s.token }
func (s *session) Valid() bool    { return s.a.stillValid(s.c) }

// Follow runs a subscription: the REST stream's filter, devices and poll place for
// notifications, the command poll's for commands.
func (s *session) Follow(ctx context.Context, kind string, q url.Values, started func(), push func(json.RawMessage) error) error {
	r := s.base.Clone(ctx)
	r.Method, r.URL = http.MethodGet, &url.URL{Path: Prefix + "/device/" + kind + "/poll", RawQuery: q.Encode()}
	rec := &recorder{}
	a, c := s.a, s.c
	if f := unsupportedFilter(r); f != "" {
		return &transport.APIError{Code: http.StatusBadRequest, Message: "filter " + f + " is not supported on a subscription: it takes deviceId, names, timestamp, networkIds and deviceTypeIds"}
	}
	devsOf := a.devicesParam
	if kind == transport.FollowCommands {
		devsOf = a.commandDevices
	} else if kind != transport.FollowNotifications {
		return &transport.APIError{Code: http.StatusBadRequest, Message: "no such subscription: " + trim(kind)}
	}
	devs, ok := devsOf(rec, r, c)
	if !ok {
		return rec.err()
	}
	var run func() error
	if kind == transport.FollowNotifications {
		f, err := pollFilter(q, devs)
		if err != nil {
			return &transport.APIError{Code: http.StatusBadRequest, Message: err.Error()}
		}
		run = func() error {
			return a.followNotifications(ctx, c, devs, f, func(n notificationJSON) error { return pushJSON(push, n) }, func() error { return nil }, func() {})
		}
	} else {
		f, err := commandPollFilter(q, devs)
		if err != nil {
			return &transport.APIError{Code: http.StatusBadRequest, Message: err.Error()}
		}
		run = func() error {
			return a.followCommands(ctx, c, devs, f, func(cmd commandJSON) error { return pushJSON(push, cmd) })
		}
	}
	release, ok := a.holdPoll(rec, c)
	if !ok {
		return rec.err()
	}
	defer release()
	started()
	return run()
}

func pushJSON(push func(json.RawMessage) error, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return push(b)
}

// recorder takes a refusal a REST helper writes (fail), for Follow to return as an error.
type recorder struct {
	h      http.Header
	status int
	body   strings.Builder
}

func (r *recorder) Header() http.Header {
	if r.h == nil {
		r.h = http.Header{}
	}
	return r.h
}
func (r *recorder) WriteHeader(code int)        { r.status = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.WriteString(string(b)) }

// err is the refusal as an *APIError.
func (r *recorder) err() error {
	var e apiError
	if json.Unmarshal([]byte(r.body.String()), &e) != nil || e.Message == "" {
		e.Message = http.StatusText(r.status)
	}
	return &transport.APIError{Code: r.status, Message: e.Message}
}
