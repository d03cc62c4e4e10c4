package deviceplain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/net/netutil"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/deviceconn"
)

// Server is the plain device listener: TCP on a loopback address, and beside it the
// in-process listener devices' direct forwards are handed to.
type Server struct {
	srv     *http.Server
	ln      net.Listener
	session *deviceconn.Listener
	mux     *http.ServeMux
	mounts  []string
}

// maxConns bounds the listener's connections (one keep-alive connection per device is
// the normal case).
const maxConns = 65536

// maxConnsPerAddress bounds what one local address holds over TCP (devices' own
// forwards come in process and are bounded by their profiles' max_channels).
const maxConnsPerAddress = 64

// Listen binds addr, which must be a loopback IP:PORT: only the hub's forwards and local
// processes may reach it.
func Listen(addr string, log *slog.Logger) (*Server, error) {
	if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("device listener %q: want a loopback IP:PORT such as 127.0.0.1:8080 (devices reach it over their SSH session)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("device listener: %w", err)
	}
	retrying := acceptor.Retrying(ln, "device plain", log)
	perAddr := acceptor.LimitPerPeer(retrying, maxConnsPerAddress, acceptor.PeerHost, nil)
	s := &Server{ln: netutil.LimitListener(perAddr, maxConns), session: deviceconn.NewListener(ln.Addr()), mux: http.NewServeMux()}
	s.srv = &http.Server{
		ConnContext:       connContext,
		Handler:           contain.HTTP(log, "device plain listener", s.mux),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Mount serves h for pattern (an http.ServeMux pattern: "/api/rest/" a subtree, "/soap"
// one path); call it before Serve. A path nothing is mounted on is answered 404 with
// the paths there are.
func (s *Server) Mount(pattern string, h http.Handler) {
	if len(s.mounts) == 0 {
		s.mux.HandleFunc("/", s.notFound)
	}
	s.mux.Handle(pattern, h)
	s.mounts = append(s.mounts, pattern)
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	http.Error(w, fmt.Sprintf("nothing is served at %s here; the device paths are %v", r.URL.Path, s.mounts), http.StatusNotFound)
}

// Addr is the bound TCP address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Session is the listener devices' direct forwards are handed to in process (the hub
// adds it to sshd's Services).
func (s *Server) Session() *deviceconn.Listener { return s.session }

// Serve answers until Close, on the TCP listener and the in-process one.
func (s *Server) Serve() error {
	go s.srv.Serve(s.session) // ends with the server
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops accepting and gives requests in flight a few seconds (long polls end).
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	s.ln.Close() // bound but never served (a start that failed later)
	s.session.Close()
}
