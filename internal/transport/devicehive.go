package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// DeviceHive is the hub's DeviceHive REST API as another transport speaks it (the
// WebSocket API): each action is run as the REST request it stands for, so identities,
// rights, limits, audit and the store are REST's own, not a copy.
type DeviceHive interface {
	// ServeHTTP serves the REST paths (under /api/rest) exactly as for a REST client; a
	// request built from a socket's message carries the socket's request context (its
	// connection's proven device on the plain listener), remote address and, once the
	// socket authenticated, its token.
	http.Handler
	// Authenticate proves r's caller by token, or, with token "", by what r's connection
	// proves (a device on the plain listener's SSH alias). The error is an *APIError.
	Authenticate(r *http.Request, token string) (DeviceHiveCaller, error)
	// AnnounceWebSocket tells the REST API's /info where the WebSocket API is served.
	AnnounceWebSocket(path string)
}

// DeviceHiveCaller is a caller the REST API proved once, for a socket's lifetime.
type DeviceHiveCaller interface {
	// String names it for logs and errors: "device d1", "account alice".
	String() string
	// Device is the device it is ("" for an account).
	Device() string
	// Token is the token it proved itself with ("" for a device proved by its
	// connection): the socket's requests carry it.
	Token() string
	// Valid reports whether it is still live: a device not revoked, removed or enrolled
	// again, an account not removed.
	Valid() bool
	// Follow runs a subscription until ctx ends, push fails or the caller's access
	// ends: kind is FollowNotifications or FollowCommands, q the REST poll's parameters
	// (deviceId, names, timestamp, returnUpdatedCommands). It holds one of the REST
	// API's poll places (per device, per account, per hub) while it runs. It calls
	// started once it holds the place and the filter is good, then push with each item
	// in REST's JSON, oldest first. An error before started is an *APIError.
	Follow(ctx context.Context, kind string, q url.Values, started func(), push func(json.RawMessage) error) error
}

// The kinds of subscription DeviceHiveCaller.Follow runs.
const (
	FollowNotifications = "notification"
	FollowCommands      = "command"
)

// APIError is a refusal in DeviceHive's terms: an HTTP status and a message.
type APIError struct {
	Code    int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }
