package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Prefix is where the API lives on every listener.
const Prefix = "/api/rest"

// APIVersion is the DeviceHive API version the handlers follow.
const APIVersion = "3.5.0"

// Registry is what the API reads and writes in the registry.
type Registry interface {
	devicedir.Source
	DeviceData(ctx context.Context, device string) (json.RawMessage, error)
	SetDeviceData(ctx context.Context, device string, data json.RawMessage) error
	AddEvent(ctx context.Context, e registry.Event) error
	GroupInfos(ctx context.Context, kind string) ([]registry.GroupInfo, error)
}

// Store is the telemetry store's read and write API.
type Store interface {
	Append(ctx context.Context, items ...telemetry.Notification) ([]telemetry.Notification, error)
	Get(ctx context.Context, device string, id int64) (telemetry.Notification, error)
	List(ctx context.Context, f telemetry.Filter) ([]telemetry.Notification, error)
	Poll(ctx context.Context, f telemetry.Filter) ([]telemetry.Notification, error)
	Stream(ctx context.Context, f telemetry.Filter, fn func([]telemetry.Notification) error) error
	CommandStore
}

// Hub is what the API asks the running hub: grants, account logins (the front door's,
// nil when it is off), and the domain operations with consequences beyond the registry.
type Hub interface {
	Policy() *access.Policy
	// RevokeDevice and RemoveDevice change the registry and close what the device holds.
	RevokeDevice(ctx context.Context, device, reason string) error
	RemoveDevice(ctx context.Context, device string) error
	// RegisterDevice enrolls a new device as 'iotsafe device add' does, in groups, with
	// no SSH key yet; SetDeviceGroups replaces a device's groups.
	RegisterDevice(ctx context.Context, device string, groups []string) error
	SetDeviceGroups(ctx context.Context, device string, groups []string) error
	// AddGroup and RemoveGroup make and remove a network or device type.
	AddGroup(ctx context.Context, kind, name, description string) (registry.GroupInfo, error)
	RemoveGroup(ctx context.Context, group string) error
}

// Accounts checks front-door accounts (authn.Accounts).
type Accounts interface {
	// Password verifies an account's password under the failed-login limits.
	Password(ctx context.Context, ip, name, password string) (authn.Principal, error)
	// Token verifies an account's API token.
	Token(ip, token string) (authn.Principal, error)
	// Name returns the name of a live account.
	Name(id int64) (string, bool)
	// Credential is a live account's credential generation, which its tokens carry.
	Credential(id int64) (string, bool)
}

// Config of the API (hub.yaml "rest:").
type Config struct {
	// Listen is the plain HTTP listener for devices on their SSH session's direct alias;
	// "" leaves it off. It must be a loopback address: devices reach it over their SSH
	// session, which tells the hub who they are.
	Listen string `yaml:"listen"`
	// MaxBody bounds a request body (512KiB, 1MiB or bytes); 0 means 64 KiB.
	MaxBody bytesize.Size `yaml:"max_body"`
	// MaxWait bounds a long poll's waitTimeout; 0 means 60s.
	MaxWait time.Duration `yaml:"max_wait"`
	// MaxPolls bounds long polls and streams open at once; 0 means 10000.
	MaxPolls int `yaml:"max_polls"`
	// MaxPollsPerDevice bounds what one device holds of them; 0 means 8.
	MaxPollsPerDevice int `yaml:"max_polls_per_device"`
	// MaxPollsPerAccount bounds what one account holds of them (a platform app follows
	// many devices with one stream); 0 means 100.
	MaxPollsPerAccount int `yaml:"max_polls_per_account"`
	// DeviceDataRate is how many times a second one device may replace its data (PUT
	// /device/{id}: one registry transaction each), 5 at once; 0 means 1.
	DeviceDataRate float64 `yaml:"device_data_rate"`
	// DataWrites bounds those registry transactions a second over all devices, so that
	// revocations and enrolments never queue behind device traffic; 0 means 100.
	DataWrites float64 `yaml:"data_writes"`
	// Frontdoor mounts the API on the front door's HTTPS host at /api/rest: "on" (the
	// default, also for "") or "off". Callers there always present credentials.
	Frontdoor string `yaml:"frontdoor"`
}

// Validate checks the config.
func (c *Config) Validate() error {
	switch c.Frontdoor {
	case "", "on", "off":
	default:
		return fmt.Errorf("rest.frontdoor: %q is not one of on, off", c.Frontdoor)
	}
	if c.Listen != "" {
		ap, err := netip.ParseAddrPort(c.Listen)
		if err != nil || !ap.Addr().IsLoopback() {
			return fmt.Errorf("rest.listen %q: want a loopback IP:PORT such as 127.0.0.1:8080 (devices reach it over their SSH session; platform apps use the front door)", c.Listen)
		}
	}
	if c.MaxBody < 0 || c.MaxPolls < 0 || c.MaxWait < 0 || c.MaxPollsPerDevice < 0 || c.MaxPollsPerAccount < 0 {
		return errors.New("rest: max_body, max_wait, max_polls, max_polls_per_device and max_polls_per_account must not be negative")
	}
	return nil
}

// OnFrontdoor reports whether the API is mounted on a (running) front door.
func (c *Config) OnFrontdoor() bool { return c.Frontdoor != "off" }

// ApplyDefaults fills zero fields.
func (c *Config) ApplyDefaults() {
	if c.MaxBody <= 0 {
		c.MaxBody = 64 << 10
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 60 * time.Second
	}
	if c.MaxPolls <= 0 {
		c.MaxPolls = 10000
	}
	if c.MaxPollsPerDevice <= 0 {
		c.MaxPollsPerDevice = 8
	}
	if c.MaxPollsPerAccount <= 0 {
		c.MaxPollsPerAccount = 100
	}
	if c.DeviceDataRate <= 0 {
		c.DeviceDataRate = 1
	}
	if c.DataWrites <= 0 {
		c.DataWrites = 100
	}
}

// API is the handler set. Reload refreshes its snapshot of the registry.
type API struct {
	cfg      Config
	reg      Registry
	store    Store
	commands CommandStore // the store's commands (store itself)
	hub      Hub
	accounts atomic.Pointer[accountsBox]
	tokens   *authn.Tokens
	log      *slog.Logger
	dir      *devicedir.Directory // the identities requests are checked against
	mux      *http.ServeMux
	polls    chan struct{}
	held     pollHolders // places of polls and streams, per device and account
	// dataWrites are the budgets of PUT /device/{id}: per caller, and the hub's ("").
	dataWrites, allDataWrites *throttle.Buckets
	metrics                   *Metrics
	gate                      *throttle.LogGate
	// unsignedWarned: with unsigned tokens allowed, every request using one is logged.
	unsigned bool
	wsPath   atomic.Pointer[string] // the WebSocket API's path, for /info; nil without it
}

type accountsBox struct{ a Accounts }

// New builds the API. dir is the hub's device directory (nil: the API makes its own over
// reg); call Reload, or reload dir, before serving.
func New(cfg Config, reg Registry, dir *devicedir.Directory, store Store, hub Hub, tokens *authn.Tokens, m *Metrics, log *slog.Logger) *API {
	cfg.ApplyDefaults()
	if m == nil {
		m = NewMetrics()
	}
	a := &API{cfg: cfg, reg: reg, store: store, commands: store, hub: hub, tokens: tokens, log: log, metrics: m,
		polls: make(chan struct{}, cfg.MaxPolls), gate: throttle.NewLogGate(time.Minute)}
	a.dataWrites = throttle.NewBuckets(cfg.DeviceDataRate, 5)
	a.allDataWrites = throttle.NewBuckets(cfg.DataWrites, cfg.DataWrites)
	a.unsigned = tokens.Config().AllowUnsigned
	if a.dir = dir; dir == nil {
		a.dir = devicedir.New(reg)
	}
	a.routes()
	return a
}

// SetAccounts connects the front door's accounts (nil: account logins are refused).
func (a *API) SetAccounts(acc Accounts) { a.accounts.Store(&accountsBox{acc}) }

func (a *API) accountsOrNil() Accounts {
	if b := a.accounts.Load(); b != nil {
		return b.a
	}
	return nil
}

// Reload re-reads devices and secrets into the directory (after any registry change: a
// revoked or removed device's tokens stop working at once).
func (a *API) Reload(ctx context.Context) error { return a.dir.Reload(ctx) }

// ServeHTTP serves the API (paths under Prefix).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	if f := unsupportedFilter(r); f != "" {
		// Refused, never ignored: GET /device/{id}/notification?networkId=999 answering
		// every notification would read as "these are network 999's" (issue 53.3).
		fail(sw, http.StatusBadRequest, fmt.Sprintf("filter %s is not supported on this call: GET /device takes networkId, networkName, deviceTypeId and deviceTypeName; polls, streams and subscriptions take networkIds and deviceTypeIds", f))
		a.metrics.observe("", sw.status, time.Since(start))
		return
	}
	a.mux.ServeHTTP(sw, r)
	// The mux recorded the route it chose in r.Pattern.
	a.metrics.observe(r.Pattern, sw.status, time.Since(start))
}

func (a *API) routes() {
	m := http.NewServeMux()
	h := func(pattern string, fn http.HandlerFunc) { m.HandleFunc(pattern, fn) }
	h("GET "+Prefix+"/info", a.info)
	h("GET "+Prefix+"/user/current", a.authed(a.currentUser))
	h("POST "+Prefix+"/token", a.login)
	h("POST "+Prefix+"/token/refresh", a.refresh)
	h("POST "+Prefix+"/token/create", a.authed(a.createToken))
	h("GET "+Prefix+"/device", a.authed(a.listDevices))
	h("GET "+Prefix+"/device/{id}", a.authed(a.getDevice))
	h("PUT "+Prefix+"/device/{id}", a.authed(a.putDevice))
	h("DELETE "+Prefix+"/device/{id}", a.authed(a.deleteDevice))
	for kind, k := range groupKinds {
		h("GET "+Prefix+"/"+k.path, a.authed(a.listGroups(kind)))
		h("GET "+Prefix+"/"+k.path+"/{id}", a.authed(a.getGroup(kind)))
		h("POST "+Prefix+"/"+k.path, a.authed(a.insertGroup(kind)))
		h("DELETE "+Prefix+"/"+k.path+"/{id}", a.authed(a.deleteGroup(kind)))
	}
	h("POST "+Prefix+"/device/{id}/notification", a.authed(a.insertNotification))
	h("GET "+Prefix+"/device/{id}/notification", a.authed(a.listNotifications))
	h("GET "+Prefix+"/device/{id}/notification/poll", a.authed(a.pollDevice))
	h("GET "+Prefix+"/device/{id}/notification/{nid}", a.authed(a.getNotification))
	h("GET "+Prefix+"/device/notification/poll", a.authed(a.pollMany))
	h("GET "+Prefix+"/device/notification/stream", a.authed(a.stream))
	h("POST "+Prefix+"/device/{id}/command", a.authed(a.insertCommand))
	h("GET "+Prefix+"/device/{id}/command", a.authed(a.listCommands))
	h("GET "+Prefix+"/device/{id}/command/poll", a.authed(a.pollDeviceCommands))
	h("GET "+Prefix+"/device/{id}/command/{cid}", a.authed(a.getCommand))
	h("PUT "+Prefix+"/device/{id}/command/{cid}", a.authed(a.updateCommand))
	h("GET "+Prefix+"/device/{id}/command/{cid}/poll", a.authed(a.pollCommandUpdate))
	h("GET "+Prefix+"/device/command/poll", a.authed(a.pollManyCommands))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, fmt.Sprintf("no such API call: %s %s (see docs/telemetry.md)", r.Method, trim(r.URL.Path)))
	})
	a.mux = m
}

func (a *API) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"apiVersion":         APIVersion,
		"serverTimestamp":    telemetry.FormatTime(time.Now()),
		"restServerUrl":      restURL(r),
		"webSocketServerUrl": a.webSocketURL(r),
	})
}

// statusWriter records the status for metrics; Unwrap lets ResponseController flush.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func trim(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// restURL is the API's URL as the client reached it (the listener's scheme, the Host it
// named).
func restURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + Prefix
}

// currentUser is GET /user/current: the account the token or password is of, in
// DeviceHive's user shape. A device is not a user.
func (a *API) currentUser(w http.ResponseWriter, r *http.Request, c caller) {
	if c.device != "" {
		fail(w, http.StatusForbidden, "a device's token is not a user's: /user/current answers accounts")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": c.accountID, "login": c.account,
		"role":   1, // DeviceHive's client role: an account administers nothing over the API
		"status": 0, // active
		"data":   nil, "introReviewed": true, "allDevicesAvailable": false,
	})
}
