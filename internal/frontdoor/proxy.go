package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// routeKey carries a request's resolved route from ServeHTTP to the proxy's callbacks.
type routeKey struct{}

type route struct {
	target    Target
	addr      netip.AddrPort
	who       principal
	timeout   time.Duration
	headerSet chan struct{} // closed when the device's response headers arrived
}

var errResponseTimeout = errors.New("response timeout")

func (s *Server) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport:      &perAccount{},
		Rewrite:        rewrite,
		ModifyResponse: deviceResponse,
		ErrorHandler:   s.proxyError,
	}
}

// perAccount keeps one pool of device connections per account: a connection is never
// shared between people, so a naive device server that misreads one person's request
// (a body it does not understand, requests smuggled inside it) can only answer that
// person wrongly, never another.
type perAccount struct {
	pools sync.Map // account id -> *http.Transport
}

func (p *perAccount) RoundTrip(r *http.Request) (*http.Response, error) {
	id := int64(-1)
	if rt, ok := r.Context().Value(routeKey{}).(*route); ok {
		id = rt.who.ID
	}
	t, ok := p.pools.Load(id)
	if !ok {
		t, _ = p.pools.LoadOrStore(id, &http.Transport{
			// The URL host is always a protected socket from the registry: the hub dials
			// it as its own uid, which both access layers trust (the front door checked
			// the account's grants itself).
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		})
	}
	return t.(*http.Transport).RoundTrip(r)
}

// crossOrigin reports a state-changing request that a browser sent from another origin
// (another device's host, the portal, anywhere): by Fetch metadata where the browser
// sends it, else by Origin. Requests without either (API clients) are not cross-origin.
func crossOrigin(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || u.Scheme != "https" || !strings.EqualFold(u.Host, r.Host)
}

// deviceResponse notes that the device's headers arrived and keeps the device from
// setting cookies beyond its own host or under the front door's names, or HSTS for the
// front door's names (the front door sets its own).
func deviceResponse(resp *http.Response) error {
	headersArrived(resp)
	sanitizeSetCookie(resp.Header)
	resp.Header.Del("Strict-Transport-Security")
	return nil
}

// sanitizeSetCookie drops the device's cookies that use the front door's name and makes
// the others host-only (no Domain attribute): a device could otherwise set or replace
// the login cookie of the parent domain, for every device (session fixation).
func sanitizeSetCookie(h http.Header) {
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range lines {
		parts := strings.Split(line, ";")
		name, _, _ := strings.Cut(parts[0], "=")
		name = strings.TrimSpace(name)
		if strings.EqualFold(name, SessionCookie) || strings.HasPrefix(strings.ToLower(name), "__host-") && strings.Contains(strings.ToLower(name), "iotsafe") {
			continue
		}
		keep := parts[:1]
		for _, attr := range parts[1:] {
			k, _, _ := strings.Cut(strings.TrimSpace(attr), "=")
			if !strings.EqualFold(k, "domain") {
				keep = append(keep, attr)
			}
		}
		h.Add("Set-Cookie", strings.Join(keep, ";"))
	}
}

func rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.SetURL(&url.URL{Scheme: "http", Host: rt.addr.String()})
	pr.Out.Host = pr.In.Host // the device sees the name the person used
	for _, h := range identityHeaders {
		pr.Out.Header.Del(h) // only the hub may say who the client is
	}
	pr.SetXForwarded()
	pr.Out.Header.Set("Forwarded", forwarded(pr.In))
	if rt.who.viaHeader {
		pr.Out.Header.Del("Authorization") // the front door's credential, not the device's
	}
	stripSessionCookie(pr.Out.Header)
}

// identityHeaders are headers that proxies use to tell a backend who the client or user
// is. A client's own are never passed on: a device might trust them.
var identityHeaders = []string{"X-Real-IP", "X-Client-IP", "True-Client-IP", "CF-Connecting-IP", "X-Cluster-Client-IP",
	"X-Original-Forwarded-For", "X-Forwarded-Server", "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl",
	"X-Forwarded-User", "X-Forwarded-Email", "X-Forwarded-Preferred-Username", "X-Forwarded-Groups", "X-Forwarded-Access-Token",
	"X-Auth-Request-User", "X-Auth-Request-Email", "X-Remote-User", "Remote-User", "X-User", "X-WEBAUTH-USER", "X-Authenticated-User"}

// forwarded builds an RFC 7239 Forwarded header (the client's own one is replaced: it
// cannot be trusted).
func forwarded(r *http.Request) string {
	ip := clientIP(r)
	forv := ip
	if strings.Contains(ip, ":") {
		forv = `"[` + ip + `]"`
	}
	return fmt.Sprintf("for=%s;host=%q;proto=https", forv, r.Host)
}

// stripSessionCookie removes the front door's session cookie from what the device sees.
func stripSessionCookie(h http.Header) {
	cs := h.Values("Cookie")
	if len(cs) == 0 {
		return
	}
	h.Del("Cookie")
	var keep []string
	for _, line := range cs {
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			name, _, _ := strings.Cut(part, "=")
			if strings.TrimSpace(name) != SessionCookie && part != "" {
				keep = append(keep, part)
			}
		}
	}
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

func headersArrived(resp *http.Response) error {
	if rt, ok := resp.Request.Context().Value(routeKey{}).(*route); ok {
		close(rt.headerSet)
	}
	return nil
}

func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	rt := r.Context().Value(routeKey{}).(*route)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes (the limit for %s)", tooBig.Limit, rt.target.Alias))
	case errors.Is(context.Cause(r.Context()), errResponseTimeout):
		s.fail(w, r, http.StatusGatewayTimeout, fmt.Sprintf("device %s did not answer within %s", rt.target.Device, rt.timeout))
	case r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		w.WriteHeader(499)
	default:
		s.log.Debug("proxy error", "device", rt.target.Device, "alias", rt.target.Alias, "err", err)
		s.fail(w, r, http.StatusBadGateway, fmt.Sprintf("service %s of device %s is not available", rt.target.Alias, rt.target.Device))
	}
}

// ServeHTTP routes by host name, authenticates, checks the grants and proxies.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.hsts() {
		w.Header().Set("Strict-Transport-Security", hstsValue)
	}
	entry := &accessEntry{start: time.Now(), method: r.Method, remote: clientIP(r), proto: r.Proto}
	sw := &statusWriter{ResponseWriter: w}
	defer func() { s.logAccess(entry, sw) }()
	w = sw
	r = r.WithContext(context.WithValue(r.Context(), accessKey{}, entry))
	t, err := ParseHost(r.Host, s.cfg.Domain)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("unknown host name %q: use DEVICE.%s or ALIAS.DEVICE.%s", trimForMessage(r.Host), s.cfg.Domain, s.cfg.Domain))
		return
	}
	if t.Portal {
		s.portal(w, r)
		return
	}
	entry.device, entry.alias = t.Device, t.Alias
	who, err := s.authenticate(r, entry.remote)
	if err != nil {
		if name, _, ok := r.BasicAuth(); ok {
			entry.user = s.accounts.LogName(name) // the name tried, if it is one
		}
		s.authFailed(w, r, err)
		return
	}
	entry.user = who.Name
	if !who.viaHeader && crossOrigin(r) {
		// The login cookie is sent to every device host: a page on one device must not
		// make the person's browser change state on another (or on this one from elsewhere).
		s.fail(w, r, http.StatusForbidden, "cross-origin request refused: a state-changing request with the login cookie must come from a page of this host")
		return
	}
	pol := s.access.Policy()
	notFound := fmt.Sprintf("no device %s here", t.Device)
	if !pol.VisibleToAccount(who.ID, t.Device) {
		s.fail(w, r, http.StatusNotFound, notFound)
		return
	}
	if !pol.AllowedAccount(who.ID, t.Device, t.Alias) {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("account %s may not reach service %s of device %s", who.Name, t.Alias, t.Device))
		return
	}
	addr, ok := s.routes.get(t.Device, t.Alias)
	if !ok || !s.sessions.Online(t.Device) {
		if addr, ok = s.lookupRoute(w, r, t); !ok {
			return
		}
	}
	limit, timeout := s.limits.Load().limits(t.Alias)
	if r.ContentLength > limit {
		s.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes (the limit for %s)", limit, t.Alias))
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	rte := &route{target: t, addr: addr, who: who, timeout: timeout, headerSet: make(chan struct{})}
	// The response timeout covers waiting for the device's headers only: bodies (downloads,
	// server-sent events, WebSocket) may stream for as long as they like.
	timer := time.AfterFunc(timeout, func() {
		select {
		case <-rte.headerSet:
		default:
			cancel(errResponseTimeout)
		}
	})
	defer timer.Stop()
	s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, routeKey{}, rte)))
}

// lookupRoute asks the registry where device/alias lives and whether the device can be
// reached; it answers the request itself when not. A socket never moves once allocated,
// so an online device's route is cached (until the next Reload).
func (s *Server) lookupRoute(w http.ResponseWriter, r *http.Request, t Target) (netip.AddrPort, bool) {
	notFound := fmt.Sprintf("no device %s here", t.Device)
	rt, err := s.reg.Route(r.Context(), t.Device, t.Alias)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, notFound)
		return netip.AddrPort{}, false
	case err != nil:
		s.log.Error("route lookup failed", "device", t.Device, "err", err)
		s.fail(w, r, http.StatusInternalServerError, "the hub could not look up the device; see its log")
		return netip.AddrPort{}, false
	case rt.Addr == nil:
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("device %s has no service %s", t.Device, t.Alias))
		return netip.AddrPort{}, false
	case rt.Revoked:
		s.fail(w, r, http.StatusBadGateway, fmt.Sprintf("device %s is revoked", t.Device))
		return netip.AddrPort{}, false
	case !s.sessions.Online(t.Device):
		msg := fmt.Sprintf("device %s is offline (it has never connected)", t.Device)
		if rt.LastSeen != nil {
			msg = fmt.Sprintf("device %s is offline since %s", t.Device, rt.LastSeen.UTC().Format(time.RFC3339))
		}
		s.fail(w, r, http.StatusBadGateway, msg)
		return netip.AddrPort{}, false
	}
	s.routes.put(t.Device, t.Alias, rt.Addr.Addr)
	return rt.Addr.Addr, true
}

// routeCache maps device/alias to its protected socket.
type routeCache struct {
	mu sync.RWMutex
	m  map[[2]string]netip.AddrPort
}

func (c *routeCache) get(device, alias string) (netip.AddrPort, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	a, ok := c.m[[2]string{device, alias}]
	return a, ok
}

func (c *routeCache) put(device, alias string, a netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 100000 {
		c.m = map[[2]string]netip.AddrPort{}
	}
	c.m[[2]string{device, alias}] = a
}

func (c *routeCache) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// authFailed answers a request without valid credentials: browsers go to the login
// page, other clients get 401 with the schemes they may use.
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, authn.ErrTooMany):
		w.Header().Set("Retry-After", s.retryAfter())
		s.fail(w, r, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, errNoCredentials) && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html"):
		http.Redirect(w, r, s.portalURL(r, "/login?next="+url.QueryEscape("https://"+r.Host+r.URL.RequestURI())), http.StatusSeeOther)
	default:
		w.Header().Add("WWW-Authenticate", `Basic realm="iotsafe", charset="UTF-8"`)
		w.Header().Add("WWW-Authenticate", `Bearer realm="iotsafe"`)
		s.fail(w, r, http.StatusUnauthorized, err.Error())
	}
}

// retryAfter is the Retry-After value for a blocked login: the length of a window.
func (s *Server) retryAfter() string { return fmt.Sprint(int(s.cfg.LoginWindow.Seconds())) }

// fail writes a short plain-text answer a person can act on.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if e, ok := r.Context().Value(accessKey{}).(*accessEntry); ok {
		e.reason = msg
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintf(w, "%d %s: %s\n", code, http.StatusText(code), msg)
}

func clientIP(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String()
	}
	return r.RemoteAddr
}

func trimForMessage(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
