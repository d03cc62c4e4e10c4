package restapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/iotsafe/iotsafe/internal/contain"
)

// Plain is the API's plain HTTP listener for devices on their SSH session: it must be
// on loopback, where only the hub's forwards (from each device's pool address) and local
// processes connect.
type Plain struct {
	srv *http.Server
	ln  net.Listener
}

// maxPlainConns bounds the plain listener's connections (one keep-alive connection per
// device is the normal case).
const maxPlainConns = 65536

// ListenPlain binds cfg.Listen, refusing an address that is not loopback.
func (a *API) ListenPlain(log *slog.Logger) (*Plain, error) {
	if err := a.cfg.Validate(); err != nil || a.cfg.Listen == "" {
		return nil, fmt.Errorf("rest: plain listener: %v", err)
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("rest: %w", err)
	}
	p := &Plain{ln: netutil.LimitListener(ln, maxPlainConns)}
	p.srv = &http.Server{
		Handler: contain.HTTP(log, "rest plain listener", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r = r.WithContext(context.WithValue(r.Context(), plainKey{}, true))
			if h, ok := a.plainExtra[r.URL.Path]; ok {
				h.ServeHTTP(w, r)
				return
			}
			a.ServeHTTP(w, r)
		})),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// MountPlain serves h at exactly path on the plain listener too (another telemetry path
// on the same port, such as SOAP); call it before ListenPlain.
func (a *API) MountPlain(path string, h http.Handler) {
	if a.plainExtra == nil {
		a.plainExtra = map[string]http.Handler{}
	}
	a.plainExtra[path] = h
}

// OnPlain reports whether r came in on the plain listener, where a source address is a
// device's pool address.
func OnPlain(r *http.Request) bool { return r.Context().Value(plainKey{}) != nil }

// Addr is the bound address.
func (p *Plain) Addr() net.Addr { return p.ln.Addr() }

// Serve answers until Close.
func (p *Plain) Serve() error {
	if err := p.srv.Serve(p.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops accepting and gives requests in flight a few seconds (long polls end).
func (p *Plain) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
	p.ln.Close() // bound but never served (a start that failed later)
}
