package wsapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/transport"
)

// Server is the running API: a transport.Transport and transport.DeviceWatcher.
type Server struct {
	cfg     Config
	rest    transport.DeviceHive
	log     *slog.Logger
	metrics *metrics
	up      websocket.Upgrader

	mu      sync.Mutex
	closed  bool
	sockets map[*socket]struct{}
	unauth  map[netip.Addr]int // sockets not authenticated yet, per source address
	callers map[string]int     // authenticated sockets per device ("d:") and account ("a:")
	// upgrading are the sockets admitted that are not in sockets yet.
	upgrading int
	serving   sync.WaitGroup // the sockets' goroutines, which Close waits for
	stopPings chan struct{}
}

// Open serves the API at Path on the front door (when the REST API is there: onFront)
// and on the plain listener.
func Open(cfg Config, onFront bool, d transport.Deps) (*Server, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.DeviceHive == nil {
		return nil, errors.New("websocket: the API needs the REST API (the front door or rest.listen)")
	}
	s := &Server{cfg: cfg, rest: d.DeviceHive, log: d.Log, metrics: newMetrics(),
		sockets: map[*socket]struct{}{}, unauth: map[netip.Addr]int{}, callers: map[string]int{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.up = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		// Small buffers, one write buffer pool: an idle socket holds little.
		ReadBufferSize: 1024, WriteBufferSize: 1024, WriteBufferPool: &sync.Pool{},
		// Any origin: a socket proves its caller with a token in a message, never with a
		// cookie or the page it came from, so another site's page gains nothing by
		// opening one.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			http.Error(w, "websocket: "+reason.Error(), status)
		},
	}
	if d.Metrics != nil {
		if err := d.Metrics.Register(s.metrics.collectors()...); err != nil {
			return nil, fmt.Errorf("websocket: %w", err)
		}
	}
	mounted := false
	if d.Front != nil && onFront {
		d.Front.Mount(Path, s)
		s.log.Info("DeviceHive WebSocket API on the front door", "url", "wss://"+d.Domain+Path)
		mounted = true
	}
	if d.Plain != nil {
		d.Plain.Mount(Path, s)
		s.log.Info("DeviceHive WebSocket API for devices on their SSH session", "path", Path)
		mounted = true
	}
	if !mounted {
		return nil, errors.New("websocket: the API needs the front door (with rest.frontdoor on) or rest.listen to be served on")
	}
	s.rest.AnnounceWebSocket(Path)
	s.stopPings = make(chan struct{})
	go s.pings()
	return s, nil
}

// pings pings every socket each PingInterval, from this one goroutine (each ping on a
// short-lived one, so that a socket slow to take it delays no other).
func (s *Server) pings() {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopPings:
			return
		case <-t.C:
		}
		s.mu.Lock()
		for so := range s.sockets {
			go so.ping()
		}
		s.mu.Unlock()
	}
}

// Listeners is empty: the API is served on the hub's HTTP listeners.
func (s *Server) Listeners() []transport.Listener { return nil }

// Close closes every socket (going away).
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.stopPings)
	}
	s.closed = true
	all := make([]*socket, 0, len(s.sockets))
	for so := range s.sockets {
		all = append(all, so)
	}
	s.mu.Unlock()
	for _, so := range all {
		so.close(websocket.CloseGoingAway, "the hub is stopping")
	}
	s.serving.Wait() // their subscriptions read the store, which closes after
	return nil
}

// DevicesChanged closes the sockets whose caller is no longer live: a device revoked,
// removed, enrolled again or given a new secret, an account removed or its password
// changed. The hub calls it after every reload of devices, accounts and grants.
func (s *Server) DevicesChanged() {
	s.mu.Lock()
	var gone []*socket
	for so := range s.sockets {
		if c := so.who(); c != nil && !c.Valid() {
			gone = append(gone, so)
		}
	}
	s.mu.Unlock()
	for _, so := range gone {
		c := so.who()
		s.log.Info("socket closed: its caller's access ended", "caller", c.String(), "remote", so.remote.String())
		s.metrics.closed.WithLabelValues("access_ended").Inc()
		so.close(websocket.ClosePolicyViolation, "access ended: "+c.String()+" was revoked, removed or given new credentials")
	}
}

// ServeHTTP upgrades a request at Path to a socket and serves it until it closes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		http.Error(w, "this is DeviceHive's WebSocket API: connect with a WebSocket client (ws:// or wss://), then send {\"action\":\"authenticate\",\"token\":ACCESS_TOKEN}", http.StatusUpgradeRequired)
		return
	}
	remote := remoteAddr(r)
	// What the connection proves (a device on the plain listener's SSH alias) counts
	// from the start; elsewhere the socket must authenticate within AuthTimeout.
	proven, _ := s.rest.Authenticate(r, "")
	if why := s.admit(remote, proven); why != "" {
		s.metrics.refused.Inc()
		w.Header().Set("Retry-After", "5")
		http.Error(w, "websocket: "+why, http.StatusServiceUnavailable)
		return
	}
	conn, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		s.release(remote, proven, true)
		return // the upgrader answered
	}
	so := newSocket(s, conn, socketRequest(r), remote, proven)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.release(remote, proven, true)
		conn.Close()
		return
	}
	s.sockets[so] = struct{}{}
	s.upgrading--    // now counted in sockets
	s.serving.Add(1) // under the lock: Close, which waits, sets closed under it
	s.mu.Unlock()
	s.metrics.sockets.Inc()
	// Served on a goroutine of its own, and this handler returns: net/http then lets go
	// of the connection's request buffers and its goroutine's stack, some 20 KiB that a
	// socket held while it was open (bench websocket).
	go func() {
		defer s.serving.Done()
		defer contain.Recover(s.log, "websocket", conn)
		defer func() {
			s.mu.Lock()
			delete(s.sockets, so)
			s.mu.Unlock()
			s.metrics.sockets.Dec()
		}()
		so.serve()
	}()
}

// socketRequest is what a socket keeps of its upgrade request for the REST requests
// its actions become: the values of its context (on the plain listener, the device the
// connection proves) without its end (net/http ends it when the handler returns), the
// source address, the host and TLS state it was reached with.
func socketRequest(r *http.Request) *http.Request {
	base := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: Path}, Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		Header: http.Header{}, Host: r.Host, RemoteAddr: r.RemoteAddr, TLS: r.TLS}
	return base.WithContext(context.WithoutCancel(r.Context()))
}

// admit takes a place for a new socket from remote (proven: its caller, when the
// connection proves one), or says why not.
func (s *Server) admit(remote netip.Addr, proven transport.DeviceHiveCaller) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.sockets) + s.upgrading
	switch {
	case s.closed:
		return "the hub is stopping"
	case n >= s.cfg.MaxSockets:
		return fmt.Sprintf("the hub holds %d sockets, its most (websocket.max_sockets)", s.cfg.MaxSockets)
	case proven != nil:
		if why := s.takeCaller(proven); why != "" {
			return why
		}
	case s.unauth[remote] >= s.cfg.MaxUnauthenticatedPerAddress:
		s.log.Warn("socket refused: too many unauthenticated sockets from one address", "remote", remote.String(), "limit", s.cfg.MaxUnauthenticatedPerAddress)
		return fmt.Sprintf("%s holds %d sockets that have not authenticated, its most (websocket.max_unauthenticated_per_address)", remote, s.cfg.MaxUnauthenticatedPerAddress)
	default:
		s.unauth[remote]++
	}
	s.upgrading++
	return ""
}

// release gives back what admit took; upgrading is true while the socket never served.
func (s *Server) release(remote netip.Addr, c transport.DeviceHiveCaller, upgrading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if upgrading {
		s.upgrading--
	}
	if c != nil {
		s.giveCaller(c)
		return
	}
	if s.unauth[remote]--; s.unauth[remote] <= 0 {
		delete(s.unauth, remote)
	}
}

// callerKey is c's key in s.callers and its limit.
func (s *Server) callerKey(c transport.DeviceHiveCaller) (string, int, string) {
	if d := c.Device(); d != "" {
		return "d:" + d, s.cfg.MaxSocketsPerDevice, "max_sockets_per_device"
	}
	return "a:" + c.String(), s.cfg.MaxSocketsPerAccount, "max_sockets_per_account"
}

// takeCaller counts a socket of c (s.mu held), or says why not.
func (s *Server) takeCaller(c transport.DeviceHiveCaller) string {
	if why := s.callerFull(c); why != "" {
		return why
	}
	key, _, _ := s.callerKey(c)
	s.callers[key]++
	return ""
}

// callerFull says why c may not hold one more socket, or "" (s.mu held).
func (s *Server) callerFull(c transport.DeviceHiveCaller) string {
	key, limit, name := s.callerKey(c)
	if s.callers[key] < limit {
		return ""
	}
	s.log.Warn("socket refused: its caller holds its most", "caller", c.String(), "limit", limit)
	return c.String() + " holds " + strconv.Itoa(limit) + " sockets, its most (websocket." + name + ")"
}

func (s *Server) giveCaller(c transport.DeviceHiveCaller) {
	key, _, _ := s.callerKey(c)
	if s.callers[key]--; s.callers[key] <= 0 {
		delete(s.callers, key)
	}
}

// authenticated moves a socket's place from remote's unauthenticated ones (was nil) or
// from its earlier caller to c, or says why not (and leaves it where it was).
func (s *Server) authenticated(remote netip.Addr, was, c transport.DeviceHiveCaller) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	newKey, _, _ := s.callerKey(c)
	if was != nil {
		if oldKey, _, _ := s.callerKey(was); oldKey == newKey {
			return "" // the same caller, with a new token
		}
	}
	if why := s.callerFull(c); why != "" {
		return why
	}
	if was != nil {
		s.giveCaller(was)
	} else if s.unauth[remote]--; s.unauth[remote] <= 0 {
		delete(s.unauth, remote)
	}
	s.callers[newKey]++
	return ""
}

func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
