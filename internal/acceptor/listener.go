package acceptor

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/iotsafe/iotsafe/internal/throttle"
)

// LimitPerPeer wraps ln so that one peer holds at most n of its connections at once;
// Accept closes the others as they come (onRefused, if set, is told whose). For servers
// that need a net.Listener (net/http); Serve does the same for its own loop.
func LimitPerPeer(ln net.Listener, n int, peer func(net.Conn) string, onRefused func(peer string)) net.Listener {
	return &peerListener{Listener: ln, n: n, peer: peer, refused: onRefused, held: map[string]int{}}
}

// PeerHost names a TCP peer by its address without the port.
func PeerHost(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

type peerListener struct {
	net.Listener
	n       int
	peer    func(net.Conn) string
	refused func(string)

	mu   sync.Mutex
	held map[string]int
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := l.peer(c)
		l.mu.Lock()
		ok := l.held[p] < l.n
		if ok {
			l.held[p]++
		}
		l.mu.Unlock()
		if ok {
			return &peerConn{Conn: c, release: func() { l.release(p) }}, nil
		}
		c.Close()
		if l.refused != nil {
			l.refused(p)
		}
	}
}

func (l *peerListener) release(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[p]--; l.held[p] <= 0 {
		delete(l.held, p)
	}
}

type peerConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Retrying wraps ln for a server with its own accept loop (net/http, the MQTT broker):
// Accept never returns a temporary error such as running out of descriptors. It backs
// off as Serve does, sheds the pending connection, and logs once a minute (log nil
// discards); only a closed listener (or an error that is not temporary) ends it.
func Retrying(ln net.Listener, name string, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reserveOnce.Do(func() { reserve, _ = os.Open(os.DevNull) })
	return &retryingListener{Listener: ln, l: &loop{cfg: Config{Name: name, Logger: log}, gate: throttle.NewLogGate(time.Minute)}}
}

type retryingListener struct {
	net.Listener
	l *loop
}

func (r *retryingListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := r.Listener.Accept()
		if err == nil || errors.Is(err, net.ErrClosed) || !temporary(err) {
			return c, err
		}
		if delay = next(delay); isOutOfDescriptors(err) {
			r.l.shed(r.Listener)
		}
		r.l.warn("accept:"+r.l.cfg.Name, "accept failed; retrying", "listener", r.l.cfg.Name, "err", err, "retry_in", delay.String())
		time.Sleep(delay)
	}
}

// temporary reports errors an accept loop waits out: out of descriptors or memory, a
// connection aborted before it was accepted.
func temporary(err error) bool {
	var ne interface{ Temporary() bool }
	return isOutOfDescriptors(err) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || (errors.As(err, &ne) && ne.Temporary())
}
