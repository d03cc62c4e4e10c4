package acceptor

import (
	"net"
	"sync"
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
