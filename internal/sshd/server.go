package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/kexinit"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Store is what the server needs from the registry.
type Store interface {
	DeviceByKey(ctx context.Context, key ssh.PublicKey) (*registry.Device, bool, error)
	Device(ctx context.Context, name string) (*registry.Device, error)
	Profile(ctx context.Context, name string) (*profile.Profile, error)
	EnsureSocket(ctx context.Context, device, alias string) (registry.Socket, bool, error)
	// OpenSession and CloseSession record a session's start and end, each with its audit
	// event, in one write; RecordAlgorithms updates what the start recorded.
	OpenSession(ctx context.Context, device, remote string, algos registry.Algorithms, detail string) error
	RecordAlgorithms(ctx context.Context, device string, algos registry.Algorithms) error
	CloseSession(ctx context.Context, device, remote string) error
	AddViolation(ctx context.Context, device, detail, remote string, record bool) (int, error)
	AddEvent(ctx context.Context, e registry.Event) error
	// EndSessions records that the sessions of these devices ended (last seen and a
	// session_close event each), in one transaction.
	EndSessions(ctx context.Context, devices []string, remote string) error
}

// sessionsOnly is a server on its own as the live side of its default change path:
// a revocation closes the device's sessions here, and there is nothing else to update.
type sessionsOnly struct{ s *Server }

func (l sessionsOnly) Close(device, fingerprint, why string) int {
	return l.s.KickKey(device, fingerprint, why)
}
func (sessionsOnly) Refresh()             {}
func (sessionsOnly) Reload(int64) error   { return nil }
func (sessionsOnly) Forget(string)        {}
func (sessionsOnly) Moved(string, string) {}
func (l sessionsOnly) CloseProfile(name, why string) int {
	return l.s.KickProfile(name, why)
}
func (l sessionsOnly) CloseCA(fingerprint, why string) int {
	return l.s.KickCA(fingerprint, why)
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("sshd: server closed")

// Server is the device-facing SSH server.
type Server struct {
	cfg     Config
	store   Store
	log     *slog.Logger
	metrics Metrics
	sshCfg  *ssh.ServerConfig

	handshakes chan struct{}               // semaphore of unauthenticated connections, all sources
	perSource  *throttle.Limiter           // the same, per source address
	logGate    *throttle.LogGate           // one line per source and minute for throttling
	auditGate  *throttle.LogGate           // one refused-login event per device, source and minute
	violGate   *throttle.LogGate           // one violation event per device, detail and minute
	budget     *forwardBudget              // forwarded connections open hub-wide
	joins      *throttle.Buckets           // join commands per source address
	hostKeys   atomic.Pointer[hostkey.Set] // rotation state: what devices are told and proven

	mu      sync.Mutex
	devices map[string]*deviceState // live state per device name
	pending map[string]*session     // reserved at auth (by connKey), attached after the handshake
	offers  offersSeen              // client offers recorded in the store
	ln      net.Listener
	closed  bool
	peers   map[*ssh.ServerConn]bool // peer hubs' connections (servePeer); guarded by mu
	conns   sync.WaitGroup

	// relayAdmitted: devices whose relayed notifications their gateway (the value) may
	// send, looked up once (server_telemetry.go); guarded by mu.
	relayAdmitted map[string]string

	// writes are registry writes that run after their session (the end of sessions
	// behind a gateway): Close waits for them, so none races the registry's close.
	writes   sync.WaitGroup
	writesMu sync.Mutex // orders writes.Add against Close's Wait
	noWrites bool       // Close is waiting: run the write at once instead; under writesMu
	shutdown chan struct{}
	life     context.Context // ends at Close: waits for a handshake turn end with it
	endLife  context.CancelFunc
}

// deviceState is the live state of one device across its sessions.
type deviceState struct {
	sessions sessionSet
	forwards forwardSet // alias -> the forward currently serving it
}

// New builds a server. It applies cfg's defaults itself (a zero Config listens on
// DefaultListen, loopback, with every limit at its default) and refuses an invalid one.
func New(cfg Config, store Store, hostKeys []ssh.Signer) (*Server, error) {
	if len(hostKeys) == 0 {
		return nil, errors.New("sshd: no host key")
	}
	cfg.ApplyDefaults()
	if _, err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, store: store, log: cfg.Logger, metrics: cfg.Metrics,
		handshakes: make(chan struct{}, cfg.MaxHandshakes),
		perSource:  throttle.New(cfg.PerSource),
		logGate:    throttle.NewLogGate(time.Minute),
		auditGate:  throttle.NewLogGate(time.Minute),
		joins:      throttle.NewBuckets(joinRate, joinBurst),
		violGate:   throttle.NewLogGate(time.Minute),
		budget:     newForwardBudget(cfg.ForwardMemoryMiB),
		devices:    map[string]*deviceState{},
		pending:    map[string]*session{},
		shutdown:   make(chan struct{}),
	}
	s.relayAdmitted = map[string]string{}
	s.life, s.endLife = context.WithCancel(context.Background())
	if s.cfg.Revoker == nil {
		if cs, ok := store.(control.Store); ok {
			s.cfg.Revoker = control.New(cs, sessionsOnly{s})
		}
	}
	s.sshCfg = &ssh.ServerConfig{
		Config: ssh.Config{
			KeyExchanges: cfg.Crypto.KeyExchanges,
			Ciphers:      cfg.Crypto.Ciphers,
			MACs:         cfg.Crypto.MACs,
		},
		PublicKeyAuthAlgorithms:   cfg.Crypto.DeviceKeyAlgorithms,
		MaxAuthTries:              cfg.MaxAuthTries,
		PublicKeyCallback:         s.checkKey,
		VerifiedPublicKeyCallback: s.admitSession,
		ServerVersion:             "SSH-2.0-iotsafe",
	}
	for _, k := range hostKeys {
		signer, err := restrictHostKey(k, cfg.Crypto.HostKeyAlgorithms)
		if err != nil {
			return nil, err
		}
		if signer == nil {
			continue
		}
		s.sshCfg.AddHostKey(signer)
		for _, cert := range cfg.HostCertificates {
			if bytes.Equal(cert.Key.Marshal(), k.PublicKey().Marshal()) {
				cs, err := ssh.NewCertSigner(cert, signer)
				if err != nil {
					return nil, fmt.Errorf("sshd: host certificate: %w", err)
				}
				s.sshCfg.AddHostKey(cs)
			}
		}
	}
	return s, nil
}

// restrictHostKey limits a host key to the algorithms the policy allows; nil if none.
func restrictHostKey(k ssh.Signer, allowed []string) (ssh.Signer, error) {
	as, ok := k.(ssh.AlgorithmSigner)
	if !ok {
		return nil, fmt.Errorf("sshd: host key %s cannot choose algorithms", k.PublicKey().Type())
	}
	var algos []string
	for _, a := range allowed {
		if a == k.PublicKey().Type() || k.PublicKey().Type() == ssh.KeyAlgoRSA && (a == ssh.KeyAlgoRSASHA256 || a == ssh.KeyAlgoRSASHA512 || a == ssh.KeyAlgoRSA) {
			algos = append(algos, a)
		}
	}
	if len(algos) == 0 {
		return nil, nil
	}
	return ssh.NewSignerWithAlgorithms(as, algos)
}

// Listen binds the configured address. Serve must follow.
func (s *Server) Listen() (net.Addr, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("sshd: listen: %w", err)
	}
	s.mu.Lock()
	s.ln = acceptor.Retrying(ln, "sshd", s.log)
	s.mu.Unlock()
	return ln.Addr(), nil
}

// Serve accepts device connections until Close. Listen must have been called.
func (s *Server) Serve() error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.shutdown:
				return ErrClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and friends: back off instead of spinning.
			s.warnGated("accept", "accept failed", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-s.shutdown:
				return ErrClosed
			}
			continue
		}
		s.conns.Add(1)
		go s.handleConn(c)
	}
}

// admit waits for the connection's turn among its source's handshakes, then takes one
// of the hub-wide slots. It returns nil when the connection must be dropped.
func (s *Server) admit(c net.Conn) *throttle.Ticket {
	remote := c.RemoteAddr().String()
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return nil
	}
	ticket, err := s.perSource.Acquire(s.life, ap.Addr())
	if err != nil {
		src := s.perSource.Source(ap.Addr()).String()
		s.metrics.Throttled(true)
		s.warnGated("throttle "+src, "connection from a source over its handshake limit dropped", "source", src, "reason", err.Error(),
			"startups", s.cfg.PerSource.Startups, "queue", s.cfg.PerSource.Queue)
		return nil
	}
	if ticket.Waited {
		src := s.perSource.Source(ap.Addr()).String()
		s.metrics.Throttled(false)
		s.debugGated("wait "+src, "connection waited for its source's turn", "source", src)
	}
	select {
	case s.handshakes <- struct{}{}:
		return ticket
	default:
		ticket.Done(true) // not this source's fault: charge nothing
		s.warnGated("max_handshakes", "too many handshakes in progress; dropping connection", "remote", remote, "max_handshakes", s.cfg.MaxHandshakes)
		return nil
	}
}

// warnGated logs at most one warning per key and minute, saying how many it held back.
func (s *Server) warnGated(key, msg string, args ...any) {
	if ok, n := s.logGate.Allow(key); ok {
		if n > 0 {
			args = append(args, "similar_suppressed", n)
		}
		s.log.Warn(msg, args...)
	}
}

func (s *Server) debugGated(key, msg string, args ...any) {
	if ok, n := s.logGate.Allow(key); ok {
		s.log.Debug(msg, append(args, "similar_suppressed", n)...)
	}
}

// Close stops accepting, closes every session and forward, and waits for them.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.shutdown)
	s.endLife()
	if s.ln != nil {
		s.ln.Close()
	}
	var all []*session
	var direct []string
	for _, ds := range s.devices {
		for _, ss := range ds.sessions {
			if ss.gw == nil { // a device behind a gateway ends with its gateway's session
				all = append(all, ss)
				direct = append(direct, ss.device.Name)
			}
		}
	}
	s.mu.Unlock()
	for _, ss := range all {
		ss.close("hub shutting down")
	}
	s.mu.Lock()
	for pc := range s.peers {
		pc.Close()
	}
	s.mu.Unlock()
	s.conns.Wait()
	s.writesMu.Lock()
	s.noWrites = true
	s.writesMu.Unlock()
	s.writes.Wait()
	// Every session's end in one transaction: one write each took seconds for a
	// thousand devices, longer than a supervisor waits for a clean stop.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.store.EndSessions(ctx, direct, "hub shutting down"); err != nil {
		s.log.Error("recording the end of every session failed", "sessions", len(direct), "err", err)
	}
	return nil
}

// afterSession runs a registry write in the background, one Close waits for; once
// Close waits it runs at once.
func (s *Server) afterSession(write func()) {
	s.writesMu.Lock()
	if s.noWrites {
		s.writesMu.Unlock()
		write()
		return
	}
	s.writes.Add(1)
	s.writesMu.Unlock()
	go func() {
		defer s.writes.Done()
		write()
	}()
}

// shuttingDown reports whether Close has begun.
func (s *Server) shuttingDown() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// UpdatePolicy swaps limits and timeouts for new connections (SIGHUP). Algorithms and the
// listen address need a restart.
func (s *Server) UpdatePolicy(keepalive, keepaliveTimeout, takeover time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if keepalive > 0 {
		s.cfg.KeepaliveInterval = keepalive
	}
	if keepaliveTimeout > 0 {
		s.cfg.KeepaliveTimeout = keepaliveTimeout
	}
	if takeover > 0 {
		s.cfg.TakeoverProbe = takeover
	}
}

func (s *Server) handleConn(c net.Conn) {
	defer s.conns.Done()
	defer contain.Recover(s.log, "ssh connection", c)
	remote := c.RemoteAddr().String()
	ticket := s.admit(c)
	if ticket == nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	rec := kexinit.Record(c) // what the client offers, for the console's policy dry run
	conn, chans, reqs, err := ssh.NewServerConn(rec, s.sshCfg)
	<-s.handshakes
	ticket.Done(err == nil)
	if err != nil {
		s.metrics.Handshake(false)
		s.log.Debug("handshake failed", "remote", remote, "err", err)
		c.Close()
		s.releasePending(connKey(c.RemoteAddr(), c.LocalAddr()))
		return
	}
	c.SetDeadline(time.Time{})
	s.metrics.Handshake(true)
	if peer := conn.Permissions.Extensions[extPeer]; peer != "" {
		s.servePeer(peer, conn, chans, reqs)
		return
	}
	if conn.Permissions.Extensions[extJoin] != "" {
		s.serveJoin(c, conn, chans, reqs)
		return
	}
	sess := s.attach(connKey(c.RemoteAddr(), c.LocalAddr()), conn)
	if sess == nil { // closed while handshaking
		conn.Close()
		return
	}
	sess.tcp = c
	sess.offer = s.recordOffer(rec.Offer())
	sess.run(chans, reqs)
}
