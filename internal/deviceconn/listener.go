package deviceconn

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// acceptQueue is how many handed-over connections wait for Accept; past it Dial waits
// (the server's accept loop takes them at once unless it is stopping).
const acceptQueue = 64

// Listener is a net.Listener fed in process by Dial. A server serves it beside its TCP
// listener (http.Server.Serve, the MQTT broker's listener), with the same handlers.
type Listener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener makes a listener that stands beside the TCP listener at addr.
func NewListener(addr net.Addr) *Listener {
	return &Listener{addr: addr, conns: make(chan net.Conn, acceptQueue), done: make(chan struct{})}
}

// Accept waits for the next connection handed over, until Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; connections already handed over stay the server's.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.drain()
	})
	return nil
}

// drain closes what waits in the queue: after Close, nothing will accept it.
func (l *Listener) drain() {
	for {
		select {
		case c := <-l.conns:
			c.Close()
		default:
			return
		}
	}
}

// Addr is the TCP listener's address this one stands beside.
func (l *Listener) Addr() net.Addr { return l.addr }

// Dial hands the server a new connection of device id and returns the hub's end of it.
// The two ends are a kernel socket pair: buffered, with deadlines and half-close, and
// never reachable by another process.
func (l *Listener) Dial(ctx context.Context, id Identity) (net.Conn, error) {
	select {
	case <-l.done:
		return nil, fmt.Errorf("deviceconn: %s: %w", l.addr, net.ErrClosed)
	default:
	}
	hub, server, err := socketPair()
	if err != nil {
		return nil, err
	}
	select {
	case l.conns <- &Conn{Conn: server, id: id, local: l.addr}:
		select {
		case <-l.done:
			// Closed while this one went in: Close's drain may have run before it.
			l.drain()
		default:
		}
		return hub, nil
	case <-l.done:
		err = net.ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	hub.Close()
	server.Close()
	return nil, fmt.Errorf("deviceconn: %s: %w", l.addr, err)
}

func socketPair() (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("deviceconn: socket pair: %w", err)
	}
	a, err := fileConn(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	b, err := fileConn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// fileConn makes a net.Conn of fd and closes fd (net.FileConn works on a duplicate).
func fileConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "deviceconn")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("deviceconn: %w", err)
	}
	return c, nil
}
