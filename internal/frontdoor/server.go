package frontdoor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/pki"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Access gives the current grants snapshot, the one the local access layers use
// (access.Enforcer).
type Access interface {
	Policy() *access.Policy
}

// Sessions says whether a device has a live session (on this hub or a peer).
type Sessions interface {
	Online(device string) bool
}

// Deps are what the front door works with; all but Log are required.
type Deps struct {
	Devices  Devices
	Accounts *authn.Accounts
	Access   Access
	Sessions Sessions
	Log      *slog.Logger // nil discards
}

// Devices is what the front door reads of the registry: the portal's device list and
// the route of a device's service.
type Devices interface {
	Devices(ctx context.Context) ([]*registry.Device, error)
	Route(ctx context.Context, device, alias string) (registry.Route, error)
}

// Server is a running front door.
type Server struct {
	cfg      Config
	reg      Devices
	access   Access
	sessions Sessions
	accounts *authn.Accounts
	log      *slog.Logger
	ca       *pki.CA // nil with an operator's certificate
	getCert  func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	limits   atomic.Pointer[Config] // body limits, response timeouts, routes, access log: Reconfigure changes them
	routes   routeCache
	proxy    *httputil.ReverseProxy
	srv      *http.Server
	ln       net.Listener
	mounts   []mount // handlers on DOMAIN itself beside the portal (/api/rest); set before Serve
}

type mount struct {
	prefix string
	h      http.Handler
}

// Mount serves h for paths under prefix (ending in "/") on DOMAIN itself, before the
// portal's pages: the REST API at /api/rest/. The handler does its own authentication.
// Call it before Serve.
func (s *Server) Mount(prefix string, h http.Handler) {
	s.mounts = append(s.mounts, mount{prefix, h})
}

// mounted returns the handler mounted for r's path, if any.
func (s *Server) mounted(r *http.Request) http.Handler {
	for _, m := range s.mounts {
		if strings.HasPrefix(r.URL.Path, m.prefix) {
			return m.h
		}
	}
	return nil
}

// New prepares a front door: certificates (the local CA in dataDir, created on first
// use, or the operator's files). Its people log in as d.Accounts (AccountLimits makes
// their limits from cfg). Listen binds it.
func New(cfg Config, dataDir string, d Deps) (*Server, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Devices == nil || d.Accounts == nil || d.Access == nil || d.Sessions == nil {
		return nil, errors.New("frontdoor: Devices, Accounts, Access and Sessions are required")
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, reg: d.Devices, access: d.Access, sessions: d.Sessions, accounts: d.Accounts, log: log}
	if cfg.Cert != "" {
		getCert, err := pki.FileCertificate(cfg.Cert, cfg.Key, log)
		if err != nil {
			return nil, err
		}
		s.getCert = getCert
	} else {
		// The CA's name rule is the front door's: DEVICE.DOMAIN and *.DEVICE.DOMAIN serve
		// ALIAS.DEVICE.DOMAIN, the domain's own wildcard the portal.
		ca, err := pki.LoadOrCreateCA(dataDir, cfg.Domain, func(serverName string) string {
			if t, err := ParseHost(serverName, cfg.Domain); err == nil {
				return t.Device
			}
			return ""
		}, log)
		if err != nil {
			return nil, err
		}
		s.ca, s.getCert = ca, ca.GetCertificate
	}
	s.limits.Store(&cfg)
	s.proxy = s.newProxy()
	return s, nil
}

// AccountLimits are the login limits of cfg's section, for the accounts the front door
// is given.
func AccountLimits(cfg Config) authn.AccountLimits {
	return authn.AccountLimits{MaxFailedLogins: cfg.MaxFailedLogins, LoginWindow: cfg.LoginWindow, SessionTTL: cfg.SessionTTL}
}

// DevicesChanged drops the cached routes (after device, socket and grant changes).
func (s *Server) DevicesChanged() { s.routes.reset() }

// Reconfigure applies what a running front door can change, the request limits
// (max_body, response_timeout, routes) and access_log, and returns the settings that
// differ from the running ones but take effect only at a restart.
func (s *Server) Reconfigure(cfg Config) (needRestart []string, err error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	old := s.cfg
	for _, f := range []struct {
		name string
		same bool
	}{
		{"listen", cfg.Listen == old.Listen},
		{"domain", cfg.Domain == old.Domain},
		{"cert", cfg.Cert == old.Cert},
		{"key", cfg.Key == old.Key},
		{"read_header_timeout", cfg.ReadHeaderTimeout == old.ReadHeaderTimeout},
		{"idle_timeout", cfg.IdleTimeout == old.IdleTimeout},
		{"max_conns", cfg.MaxConns == old.MaxConns},
		{"max_conns_per_address", cfg.MaxConnsPerAddress == old.MaxConnsPerAddress},
		{"session_ttl", cfg.SessionTTL == old.SessionTTL},
		{"max_failed_logins", cfg.MaxFailedLogins == old.MaxFailedLogins},
		{"login_window", cfg.LoginWindow == old.LoginWindow},
	} {
		if !f.same {
			needRestart = append(needRestart, f.name)
		}
	}
	s.limits.Store(&cfg)
	return needRestart, nil
}

// CA is the local CA, or nil when the operator gave a certificate.
func (s *Server) CA() *pki.CA { return s.ca }

// Listen binds the HTTPS listener.
func (s *Server) Listen() (net.Addr, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: %w", err)
	}
	gate := throttle.NewLogGate(time.Minute)
	perAddr := acceptor.LimitPerPeer(acceptor.Retrying(ln, "front door", s.log), s.cfg.MaxConnsPerAddress, acceptor.PeerHost, func(peer string) {
		if ok, n := gate.Allow(peer); ok {
			s.log.Warn("a client address holds too many connections; closing the new one", "remote", peer,
				"max_conns_per_address", s.cfg.MaxConnsPerAddress, "similar_suppressed", n)
		}
	})
	s.ln = netutil.LimitListener(perAddr, s.cfg.MaxConns)
	tc, err := s.cfg.TLS.Config()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("frontdoor: %w", err)
	}
	tc.GetCertificate = s.getCert
	s.srv = &http.Server{
		Handler:           contain.HTTP(s.log, "front door", s),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         tc,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return ln.Addr(), nil
}

// GetCertificate serves the front door's certificate (its local CA's or the operator's)
// for another TLS listener of the hub on the same names (the MQTT broker's).
func (s *Server) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.getCert(hello)
}

// Serve answers until Close (HTTP/2 and HTTP/1.1 over TLS 1.2/1.3).
func (s *Server) Serve() error {
	err := s.srv.ServeTLS(s.ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops accepting, then gives requests in flight a few seconds.
func (s *Server) Close() {
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	if s.ln != nil {
		s.ln.Close() // bound but never served (a start that failed later)
	}
}
