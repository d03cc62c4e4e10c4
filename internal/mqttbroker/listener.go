package mqttbroker

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/netready"
	"github.com/iotsafe/iotsafe/internal/throttle"
	"github.com/iotsafe/iotsafe/internal/tls13conn"
)

// guardedListener is a broker listener that survives what mochi's own does not: accept
// errors are retried with backoff (the hub's one accept loop, package acceptor), a
// connection must finish its TLS handshake and send CONNECT within the connect timeout,
// and the connections not yet logged in are capped per source address and in all, so a
// burst of idle connections can neither exhaust descriptors nor keep a listener dead.
// It also runs its clients (serveClient): an idle client waits in the poller, with no
// goroutine.
type guardedListener struct {
	id    string
	ln    net.Listener
	tls   *tls13conn.Server // nil: plain
	guard *loginGuard
	log   *slog.Logger
	once  sync.Once
	srv   *mqtt.Server
	ready *netready.Poller // nil: every client keeps a goroutine for as long as it is connected
}

func (l *guardedListener) ID() string              { return l.id }
func (l *guardedListener) Address() string         { return l.ln.Addr().String() }
func (l *guardedListener) Protocol() string        { return "tcp" }
func (l *guardedListener) Init(*slog.Logger) error { return nil }
func (l *guardedListener) Close(close listeners.CloseFn) {
	l.once.Do(func() {
		l.ln.Close()
		close(l.id)
	})
}

// Serve accepts until Close. Each connection's goroutine runs the handshake and the
// connect phase, then hands the client to serveClient, with a panic in it contained.
// (mochi's establish function is the same steps with a goroutine for the client's
// whole life.)
func (l *guardedListener) Serve(listeners.EstablishFn) {
	acceptor.Serve(l.ln, acceptor.Config{Name: "mqtt " + l.id, Logger: l.log}, func(raw net.Conn) {
		peer := acceptor.PeerHost(raw)
		// What mochi sees as the client's connection; over TLS, the handshake's result
		// goes in it.
		c := &lingeringConn{Conn: raw}
		if !l.guard.take(c, peer) {
			// Nothing was said on it: closed at once, so a flood of refused connections
			// holds no descriptor for the lingering second.
			raw.Close()
			return
		}
		defer l.guard.settled(c)
		// Bounds the TLS handshake and the wait for CONNECT; mochi sets the keepalive
		// deadline in its place once CONNECT is read.
		raw.SetDeadline(time.Now().Add(l.guard.timeout))
		if l.tls != nil {
			tc, err := handshakeApart(l.tls, raw)
			if err != nil {
				raw.Close()
				return
			}
			c.Conn = tc
		}
		// An error is the client's end, which the hook already reported.
		cl, err := l.srv.OpenClient(l.id, c)
		if err != nil {
			return
		}
		l.serveClient(c, cl) // the hook settled c at login
	})
}

// serveClient serves a connected client. Where the connection can be watched, the
// client waits for input in the poller with no goroutine, and a goroutine runs only
// while it has input (issue 54: a goroutine parked in Read keeps a stack of 8 KiB or
// more, the largest part of an idle client's memory). Otherwise this goroutine serves
// it to its end.
func (l *guardedListener) serveClient(c *lingeringConn, cl *mqtt.Client) {
	if raw, sc, held := watchable(c.Conn); sc != nil && l.ready != nil {
		rc, err := sc.SyscallConn()
		if err != nil {
			l.srv.ServeClient(cl, nil)
			return
		}
		// Input at hand: what the connection holds, or what the socket has within
		// activeWait.
		pending := func() bool { return held() || c.inputWithin(rc, raw, activeWait) }
		w, err := l.ready.Watch(sc, func() { go l.resume(c, cl, pending) })
		if err == nil {
			c.waitp.Store(w)
			l.idle(c, cl, pending)
			return
		}
	}
	l.srv.ServeClient(cl, nil)
}

// activeWait is how long a client just served waits in its goroutine for its next
// packet before it waits in the poller instead: a client in a flow of packets (QoS 1
// publishes one after the other, a platform's subscription) keeps its goroutine and is
// read at once, as with a goroutine per client; an idle one gives it up. Without it, a
// QoS 1 flow on loopback ran at half the rate (a wake, a new goroutine and its stack's
// growth per packet).
const activeWait = 20 * time.Millisecond

// resume serves a woken client while it has input, then lets it wait again.
func (l *guardedListener) resume(c *lingeringConn, cl *mqtt.Client, pending func() bool) {
	ended := true
	defer func() {
		if ended {
			c.waitp.Load().Stop()
		}
	}()
	defer contain.Recover(l.log, "mqtt "+l.id, c)
	if ended, _ = l.srv.ServeClient(cl, pending); !ended {
		l.idle(c, cl, pending)
	}
}

// idle arms the client's wait until its read deadline (the keepalive's, which mochi
// sets before ServeClient returns): the wake comes with input, a hang-up, the deadline
// (the read then fails as a parked Read would), or a Close. Where the wait cannot be
// armed (the connection was closed under it), this goroutine serves the rest.
func (l *guardedListener) idle(c *lingeringConn, cl *mqtt.Client, pending func() bool) {
	w := c.waitp.Load()
	if err := w.Arm(c.readDeadline()); err != nil {
		w.Stop()
		l.srv.ServeClient(cl, nil)
		return
	}
	if c.closed.Load() {
		w.Wake() // a Close that came before the wait was armed
	}
}

// watchable is the socket under c, as a net.Conn and as the syscall.Conn to watch, and
// how to ask c whether it holds input of its own; sc is nil where the client must keep a
// goroutine.
func watchable(c net.Conn) (raw net.Conn, sc syscall.Conn, held func() bool) {
	switch t := c.(type) {
	case *tls13conn.Conn:
		raw, held = t.NetConn(), t.Pending
	case *tls.Conn:
		return nil, nil, nil // TLS 1.2: crypto/tls may hold input the socket no longer has, and cannot say
	default:
		raw, held = c, noInput
	}
	sc, _ = raw.(syscall.Conn) // not one: a device's SSH session (deviceconn)
	return raw, sc, held
}

func noInput() bool { return false }

// loginGuard counts the connections that have not logged in yet: per source address
// and in all, for every listener of the broker.
type loginGuard struct {
	timeout          time.Duration
	perAddr, overall int
	log              *slog.Logger
	gate             *throttle.LogGate

	mu      sync.Mutex
	byConn  map[net.Conn]string // pending connection -> its source
	perPeer map[string]int
}

func newLoginGuard(cfg Config, log *slog.Logger) *loginGuard {
	return &loginGuard{timeout: cfg.ConnectTimeout, perAddr: cfg.MaxUnauthenticatedPerAddress, overall: cfg.MaxUnauthenticated,
		log: log, gate: throttle.NewLogGate(time.Minute), byConn: map[net.Conn]string{}, perPeer: map[string]int{}}
}

// take admits a new connection from peer unless a cap is reached (logged once a minute
// per source).
func (g *loginGuard) take(c net.Conn, peer string) bool {
	g.mu.Lock()
	full := ""
	switch {
	case g.perPeer[peer] >= g.perAddr:
		full = "max_unauthenticated_per_address"
	case len(g.byConn) >= g.overall:
		full = "max_unauthenticated"
	default:
		g.byConn[c] = peer
		g.perPeer[peer]++
	}
	g.mu.Unlock()
	if full != "" {
		if ok, n := g.gate.Allow(full + peer); ok {
			g.log.Warn("mqtt: too many connections that have not logged in yet; closing the new one",
				"event", "mqtt_connect_shed", "remote", peer, "limit", full, "suppressed", n)
		}
		return false
	}
	return true
}

// settled ends c's pending state: it logged in, or it ended. Calling it again is a no-op.
func (g *loginGuard) settled(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	peer, ok := g.byConn[c]
	if !ok {
		return
	}
	delete(g.byConn, c)
	if g.perPeer[peer]--; g.perPeer[peer] <= 0 {
		delete(g.perPeer, peer)
	}
}

// handshakeApart runs the TLS handshake in a goroutine of its own that ends with it. The
// handshake's key exchange and signature (ML-KEM, ECDSA) grow a goroutine's stack to
// tens of KiB, and a stack keeps its size while the goroutine lives: run in the
// connection's goroutine, every idle client would hold that much for as long as it is
// connected (issue 54's memory per connection). The deadline set on the connection
// bounds it. A TLS 1.3 connection comes back as a *tls13conn.Conn, which holds no
// buffer while idle; TLS 1.2 as a *tls.Conn.
func handshakeApart(srv *tls13conn.Server, raw net.Conn) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := srv.Handshake(raw)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}
