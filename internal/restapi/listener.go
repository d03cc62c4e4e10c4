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

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/deviceconn"
)

// Plain is the API's plain HTTP listener for devices on their SSH session: it must be
// on loopback, where only the hub's forwards (from each device's pool address) and local
// processes connect.
type Plain struct {
	srv     *http.Server
	ln      net.Listener
	session *deviceconn.Listener // devices' direct forwards, handed over by sshd
}

// maxPlainConns bounds the plain listener's connections (one keep-alive connection per
// device is the normal case).
const maxPlainConns = 65536

// maxPlainConnsPerAddress bounds what one local address holds over TCP (devices' own
// forwards come in process and are bounded by their profiles' max_channels).
const maxPlainConnsPerAddress = 64

// ListenPlain binds cfg.Listen, refusing an address that is not loopback.
func (a *API) ListenPlain(log *slog.Logger) (*Plain, error) {
	if err := a.cfg.Validate(); err != nil || a.cfg.Listen == "" {
		return nil, fmt.Errorf("rest: plain listener: %v", err)
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("rest: %w", err)
	}
	retrying := acceptor.Retrying(ln, "rest plain", log)
	perAddr := acceptor.LimitPerPeer(retrying, maxPlainConnsPerAddress, acceptor.PeerHost, nil)
	p := &Plain{ln: netutil.LimitListener(perAddr, maxPlainConns), session: deviceconn.NewListener(ln.Addr())}
	p.srv = &http.Server{
		ConnContext: connContext,
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

// Addr is the bound address.
func (p *Plain) Addr() net.Addr { return p.ln.Addr() }

// Session is the listener devices' direct forwards are handed to in process (the hub
// adds it to sshd's Services).
func (p *Plain) Session() *deviceconn.Listener { return p.session }

// Serve answers until Close, on the TCP listener and the in-process one.
func (p *Plain) Serve() error {
	go p.srv.Serve(p.session) // ends with the server
	if err := p.srv.Serve(p.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// proofKey holds, in a plain listener's connection context, what the connection proves
// about its device.
type proofKey struct{}

// proof is what a plain connection proves: the session that handed it over, or that
// the kernel says the hub itself opened it (a forward the hub dialled over TCP, whose
// source address is then the device's).
type proof struct {
	session deviceconn.Identity
	fromHub bool
}

func connContext(ctx context.Context, c net.Conn) context.Context {
	if id, ok := deviceconn.Of(c); ok {
		return context.WithValue(ctx, proofKey{}, proof{session: id})
	}
	if deviceconn.FromHub(c) {
		return context.WithValue(ctx, proofKey{}, proof{fromHub: true})
	}
	return ctx
}

// Close stops accepting and gives requests in flight a few seconds (long polls end).
func (p *Plain) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
	p.ln.Close() // bound but never served (a start that failed later)
	p.session.Close()
}
