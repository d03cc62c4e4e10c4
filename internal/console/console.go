package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshd"
)

// Prefix is where the console is served on the front door's own host.
const Prefix = "/console/"

// CookieName is the console's login session cookie: __Host- makes browsers take it
// only from this host, over HTTPS, for every path, with no Domain: a device's subdomain
// can neither read it nor plant one.
const CookieName = "__Host-iotsafe-console"

// EventAction is the audit event of a change made in the console, naming the account.
const EventAction = "console_action"

// Registry is what the console reads of the registry (and the audit events it writes).
type Registry interface {
	Fleet(ctx context.Context, scope registry.Scope) (registry.FleetCounts, error)
	FleetDevices(ctx context.Context, q registry.FleetQuery) (registry.FleetPage, error)
	Device(ctx context.Context, name string) (*registry.Device, error)
	Profile(ctx context.Context, name string) (*profile.Profile, error)
	Events(ctx context.Context, f registry.EventFilter) ([]registry.Event, error)
	AddEvent(ctx context.Context, e registry.Event) error
	OnlineAlgorithms(ctx context.Context, scope registry.Scope) ([]registry.AlgoGroup, error)
	OnlineWithAlgorithms(ctx context.Context, scope registry.Scope, algos []string, limit int) ([]string, error)
	Offers(ctx context.Context, hashes []string) (map[string]string, error)
	Accounts(ctx context.Context) ([]*registry.Account, error)
}

// Health is the hub's own state, for the fleet page.
type Health struct {
	Hub         string
	Listeners   map[string]string
	DataFreeMiB int64 // -1: unknown
	MinFreeMiB  int64
	Registry    string // "" when it writes; else why it cannot
	// Certs are the certificates the hub presents and when each expires.
	Certs []CertExpiry
}

// CertExpiry is one certificate the hub presents.
type CertExpiry struct {
	What     string
	NotAfter time.Time
}

// Expired reports whether the certificate has expired; Soon whether it expires within
// 30 days.
func (c CertExpiry) Expired() bool { return time.Now().After(c.NotAfter) }

// Soon reports whether the certificate expires within 30 days.
func (c CertExpiry) Soon() bool { return time.Now().Add(30 * 24 * time.Hour).After(c.NotAfter) }

// Deps are the hub's parts the console works through.
type Deps struct {
	Registry Registry
	Accounts *authn.Accounts
	Policy   func() *access.Policy
	// Apply takes a change through the hub's change path (internal/control), as the
	// CLI's admin socket does: a revoke closes the session on whichever hub holds it.
	Apply func(ctx context.Context, ch control.Change) (control.Outcome, error)
	// Sessions are a device's live sessions on this hub.
	Sessions func(device string) []sshd.SessionInfo
	Health   func() Health
	// Telemetry is the hub's telemetry store: a device's notifications and commands.
	Telemetry Telemetry
	// CSRFKey signs the forms' CSRF tokens (32 bytes or more); the hubs of a registry
	// share it. Empty: a key of this process's own.
	CSRFKey []byte
	// Crypto is the hub's SSH algorithm policy (what it offers devices now).
	Crypto func() profile.CryptoPolicy
	Log    *slog.Logger
}

// Limits of the console's live streams.
const (
	maxStreamsPerAccount = 8
	maxStreams           = 256
	maxForm              = 16 << 10
)

// Console is the operator console's handler.
type Console struct {
	d       Deps
	csrfKey []byte
	mux     *http.ServeMux
	tmpl    *template.Template
	live    *liveFeed
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New builds the console.
func New(d Deps) (*Console, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	key := d.CSRFKey
	if len(key) < 32 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c := &Console{d: d, csrfKey: key, tmpl: t, mux: http.NewServeMux()}
	c.live = newLiveFeed(d.Registry, d.Log)
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", staticFiles(http.FileServerFS(static))))
	c.mux.HandleFunc("GET /console/login", c.loginPage)
	c.mux.HandleFunc("POST /console/login", c.login)
	c.mux.HandleFunc("POST /console/logout", c.authed(c.logout))
	c.mux.HandleFunc("GET /console/{$}", c.authed(c.overview))
	c.mux.HandleFunc("GET /console/devices", c.authed(c.devices))
	c.mux.HandleFunc("GET /console/devices/{name}", c.authed(c.device))
	c.mux.HandleFunc("GET /console/devices/{name}/{action}", c.authed(c.confirmPage))
	c.mux.HandleFunc("POST /console/devices/{name}/{action}", c.authed(c.act))
	c.mux.HandleFunc("POST /console/devices/{name}/command", c.authed(c.command))
	c.mux.HandleFunc("GET /console/audit", c.authed(c.audit))
	c.mux.HandleFunc("GET /console/crypto", c.authed(c.crypto))
	c.mux.HandleFunc("GET /console/accounts", c.authed(c.accounts))
	c.mux.HandleFunc("POST /console/grants/{op}", c.authed(c.grant))
	c.mux.HandleFunc("GET /console/live", c.authed(c.stream))
	return c, nil
}

// Close stops the live feed.
func (c *Console) Close() { c.live.close() }

// ServeHTTP serves the console's paths, with the headers every page carries.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/console/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if r.URL.Path == "/console" {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	c.mux.ServeHTTP(w, r)
}

func staticFiles(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		h.ServeHTTP(w, r)
	})
}

// caller is the logged-in account of a request.
type caller struct {
	authn.Principal
	sid  string // the session cookie's value
	csrf string
	ip   string
}

// authed runs h for a logged-in account that holds a console role somewhere; others go
// to the login page (GET) or are refused.
func (c *Console) authed(h func(http.ResponseWriter, *http.Request, caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(CookieName)
		var who authn.Principal
		ok := err == nil
		if ok {
			who, ok = c.d.Accounts.Session(ck.Value)
		}
		if !ok {
			if r.Method == http.MethodGet && r.URL.Path != "/console/live" {
				http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.fail(w, http.StatusUnauthorized, "log in first: "+Prefix+"login")
			return
		}
		if !c.d.Policy().HoldsAnywhere(who.ID, registry.RightView) {
			c.fail(w, http.StatusForbidden, "this account has no console role: an admin grants one ('iotsafe grant --account "+who.Name+" @all +view')")
			return
		}
		cl := caller{Principal: who, sid: ck.Value, csrf: c.token(ck.Value), ip: clientIP(r)}
		if r.Method == http.MethodPost {
			if err := c.checkPost(r, cl); err != nil {
				c.d.Log.Warn("console: a change refused", "account", who.Name, "path", r.URL.Path, "remote", cl.ip, "err", err)
				c.fail(w, http.StatusForbidden, err.Error())
				return
			}
		}
		h(w, r, cl)
	}
}

// token is the CSRF token of a login session: only pages of this console, which the
// session's own browser loaded, carry it.
func (c *Console) token(sid string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte(sid))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

var errForged = errors.New("the form did not come from this console (missing or wrong CSRF token, or another site): reload the page and try again")

// checkPost refuses a change that did not come from a page of this console: another
// origin, or no valid CSRF token.
func (c *Console) checkPost(r *http.Request, cl caller) error {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "https" || !strings.EqualFold(u.Host, r.Host) {
			return errForged
		}
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return errForged
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("malformed form: %v", err)
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(cl.csrf)) != 1 {
		return errForged
	}
	return nil
}

// recheckPassword asks for the account's password again before a destructive change.
func (c *Console) recheckPassword(r *http.Request, cl caller) error {
	if _, err := c.d.Accounts.Password(r.Context(), cl.ip, cl.Name, r.PostFormValue("password")); err != nil {
		return fmt.Errorf("password: %v", err)
	}
	return nil
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "login.html", page{Title: "Log in", Next: safeNext(r.URL.Query().Get("next"))})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	// A cross-site form must not log a victim into the attacker's account.
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if u, err := url.Parse(o); err != nil || !strings.EqualFold(u.Host, r.Host) {
			c.fail(w, http.StatusForbidden, "login form posted from another site")
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, http.StatusBadRequest, "malformed login form")
		return
	}
	next := safeNext(r.PostFormValue("next"))
	who, err := c.d.Accounts.Password(r.Context(), clientIP(r), r.PostFormValue("user"), r.PostFormValue("password"))
	if err == nil && !c.d.Policy().HoldsAnywhere(who.ID, registry.RightView) {
		err = errors.New("this account has no console role: an admin grants one ('iotsafe grant --account NAME @all +view')")
	}
	if err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, authn.ErrTooMany) {
			status = http.StatusTooManyRequests
		}
		c.render(w, status, "login.html", page{Title: "Log in", Error: err.Error(), Next: next})
		return
	}
	sid, err := c.d.Accounts.NewSession(r.Context(), who.ID)
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: sid, Path: "/", Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	c.audit1(r.Context(), caller{Principal: who, ip: clientIP(r)}, "", "logged in")
	if next == "" {
		next = Prefix
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, cl caller) {
	if err := c.d.Accounts.EndSession(r.Context(), cl.sid); err != nil {
		c.d.Log.Error("console: logout could not be recorded", "account", cl.Name, "err", err)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// safeNext keeps a redirect target inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	return next
}

// audit1 records a console action with the account that made it.
func (c *Console) audit1(ctx context.Context, cl caller, device, what string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e := registry.Event{Device: device, Kind: EventAction, Detail: "account " + cl.Name + ": " + what, Remote: cl.ip}
	if err := c.d.Registry.AddEvent(ctx, e); err != nil {
		c.d.Log.Error("console: recording an action failed", "account", cl.Name, "device", device, "what", what, "err", err)
	}
}

func (c *Console) fail(w http.ResponseWriter, status int, msg string) {
	c.render(w, status, "error.html", page{Title: http.StatusText(status), Error: msg})
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.tmpl.ExecuteTemplate(w, name, p); err != nil {
		c.d.Log.Error("console: rendering a page failed", "page", name, "err", err)
	}
}

func clientIP(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String()
	}
	return r.RemoteAddr
}
