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
	"github.com/iotsafe/iotsafe/internal/pki"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Backend is what the front door asks the hub.
type Backend interface {
	// Policy is the current grants snapshot (the same one the local access layers use).
	Policy() *access.Policy
	// Online reports whether the device has a live session.
	Online(device string) bool
}

// Server is a running front door.
type Server struct {
	cfg      Config
	reg      *registry.Registry
	be       Backend
	log      *slog.Logger
	ca       *pki.CA // nil with an operator's certificate
	getCert  func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	dir      atomic.Pointer[directory]
	limits   atomic.Pointer[Config] // body limits, response timeouts, routes: Reconfigure changes them
	auth     *authenticator
	sessions *sessionStore
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

// CheckPassword verifies an account's password with the front door's failed-login limits
// (for the REST API's logins).
func (s *Server) CheckPassword(ctx context.Context, ip, name, password string) (int64, string, error) {
	p, err := s.auth.password(ctx, s.dir.Load(), ip, name, password)
	return p.ID, p.Name, err
}

// CheckToken verifies an account's API token.
func (s *Server) CheckToken(ip, token string) (int64, string, error) {
	p, err := s.auth.token(s.dir.Load(), ip, token)
	return p.ID, p.Name, err
}

// AccountName returns a live account's name.
func (s *Server) AccountName(id int64) (string, bool) {
	a := s.dir.Load().byID[id]
	if a == nil {
		return "", false
	}
	return a.Name, true
}

// New prepares a front door: certificates (the local CA in dataDir, created on first
// use, or the operator's files) and the account snapshot. Listen binds it.
func New(ctx context.Context, cfg Config, dataDir string, reg *registry.Registry, be Backend, log *slog.Logger) (*Server, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, reg: reg, be: be, log: log,
		auth:     newAuthenticator(newFailLimiter(cfg.MaxFailedLogins, cfg.LoginWindow)),
		sessions: newSessionStore(cfg.SessionTTL, reg),
	}
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
	if err := s.Reload(ctx); err != nil {
		return nil, err
	}
	s.limits.Store(&cfg)
	s.proxy = s.newProxy()
	return s, nil
}

// Reload re-reads accounts, tokens and login sessions (after account and token changes).
func (s *Server) Reload(ctx context.Context) error {
	d, err := loadDirectory(ctx, s.reg)
	if err != nil {
		return err
	}
	if err := s.sessions.load(ctx); err != nil {
		return err
	}
	s.dir.Store(d)
	s.routes.reset()
	return nil
}

// Reconfigure applies what a running front door can change, the request limits
// (max_body, response_timeout, routes), and returns the settings that differ from the
// running ones but take effect only at a restart.
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
	perAddr := acceptor.LimitPerPeer(ln, s.cfg.MaxConnsPerAddress, acceptor.PeerHost, func(peer string) {
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
		Handler:           s,
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
}
