package sockets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/acceptor"
)

// Shared serves protected sockets without a descriptor each (pool.shared_listeners):
// one listener per port of the pool, bound to the wildcard address of the loopback
// device only (SO_BINDTODEVICE "lo"), takes the connections to that port on every
// local address and hands each to the protected socket its destination names. A
// destination that names none (another local address, or a device that is offline)
// is reset, as a closed port would be refused.
//
// Why this way: a hub with one listener per socket needs about two descriptors per
// device and stops near 9,700 devices under a 20,000-descriptor limit; the ports a
// pool uses are few (one per alias), so this needs a handful. The cost: each port is
// taken on every local address of the machine (another program, or another hub in the
// same network namespace, cannot listen on it: give each hub its own pool.port_base),
// and only traffic arriving on the loopback device reaches it, which is all a
// protected socket ever takes (remote hosts reach other interfaces and are refused by
// the kernel). sk_lookup steering would avoid the first cost but is refused by this
// kernel (a listening TCP socket cannot enter a SOCKMAP).
type Shared struct {
	log *slog.Logger

	mu     sync.Mutex
	ports  map[sharedKey]*sharedPort
	routes map[netip.AddrPort]func(net.Conn)
	closed bool
	// fallback takes connections to addresses no route serves (SetFallback).
	fallback func(net.Conn) bool
	// held are ports kept listening without a route of this hub (Hold).
	held map[sharedKey]bool
}

type sharedKey struct {
	port uint16
	v6   bool
}

type sharedPort struct {
	ln   net.Listener
	uses int
}

// NewShared makes an empty set of shared listeners; log may be nil.
func NewShared(log *slog.Logger) *Shared {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Shared{log: log, ports: map[sharedKey]*sharedPort{}, routes: map[netip.AddrPort]func(net.Conn){}}
}

// Handle serves the protected socket a: each connection to it runs serve in its own
// goroutine. The port's listener is opened with its first socket and closed with its
// last. Close the result to stop serving a.
func (s *Shared) Handle(a netip.AddrPort, serve func(net.Conn)) (io.Closer, error) {
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	key := sharedKey{port: a.Port(), v6: a.Addr().Is6()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, net.ErrClosed
	}
	if _, dup := s.routes[a]; dup {
		return nil, fmt.Errorf("sockets: %s is already served", a)
	}
	if err := s.use(key); err != nil {
		return nil, err
	}
	s.routes[a] = serve
	return closerFunc(func() error { return s.drop(a, key) }), nil
}

// use counts one more user of the port's listener, opening it for the first; s.mu held.
func (s *Shared) use(key sharedKey) error {
	p := s.ports[key]
	if p == nil {
		ln, err := listenLoopbackPort(key)
		if err != nil {
			return err
		}
		p = &sharedPort{ln: ln}
		s.ports[key] = p
		go acceptor.Serve(ln, acceptor.Config{Name: "protected sockets :" + fmt.Sprint(key.port), Logger: s.log}, s.dispatch)
	}
	p.uses++
	return nil
}

// unuse counts one user less, closing the listener with its last; s.mu held.
func (s *Shared) unuse(key sharedKey) error {
	if p := s.ports[key]; p != nil {
		if p.uses--; p.uses == 0 {
			delete(s.ports, key)
			return p.ln.Close()
		}
	}
	return nil
}

// Hold keeps exactly these ports listening (IPv6 ones if v6) whether or not a socket
// of this hub uses them, so connections to sockets of devices another hub holds reach
// the fallback. Ports no longer given are let go.
func (s *Shared) Hold(ports []uint16, v6 bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	if s.held == nil {
		s.held = map[sharedKey]bool{}
	}
	want := map[sharedKey]bool{}
	var errs []error
	for _, p := range ports {
		key := sharedKey{port: p, v6: v6}
		want[key] = true
		if !s.held[key] {
			if err := s.use(key); err != nil {
				errs = append(errs, fmt.Errorf("port %d: %w", p, err))
				continue
			}
			s.held[key] = true
		}
	}
	for key := range s.held {
		if !want[key] {
			delete(s.held, key)
			s.unuse(key)
		}
	}
	return errors.Join(errs...)
}

// dispatch hands a connection to the socket its destination names.
func (s *Shared) dispatch(c net.Conn) {
	var serve func(net.Conn)
	if la, ok := c.LocalAddr().(*net.TCPAddr); ok {
		a := la.AddrPort()
		s.mu.Lock()
		serve = s.routes[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())]
		s.mu.Unlock()
	}
	if serve == nil {
		s.mu.Lock()
		fb := s.fallback
		s.mu.Unlock()
		if fb != nil && fb(c) {
			return
		}
		reset(c)
		return
	}
	serve(c)
}

// SetFallback gives the connections to addresses no socket serves here to fb, which
// returns whether it took the connection (else it is reset): a hub of a shared
// registry relays those of devices another hub holds.
func (s *Shared) SetFallback(fb func(net.Conn) bool) {
	s.mu.Lock()
	s.fallback = fb
	s.mu.Unlock()
}

func (s *Shared) drop(a netip.AddrPort, key sharedKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.routes[a]; !ok {
		return nil
	}
	delete(s.routes, a)
	return s.unuse(key)
}

// Listeners is how many shared listeners are open (one per port in use).
func (s *Shared) Listeners() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ports)
}

// Close stops every shared listener.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for k, p := range s.ports {
		errs = append(errs, p.ln.Close())
		delete(s.ports, k)
	}
	clear(s.routes)
	return errors.Join(errs...)
}

// listenLoopbackPort binds the wildcard address of one family on port, restricted to
// the loopback device.
func listenLoopbackPort(key sharedKey) (net.Listener, error) {
	network, addr := "tcp4", fmt.Sprintf("0.0.0.0:%d", key.port)
	if key.v6 {
		network, addr = "tcp6", fmt.Sprintf("[::]:%d", key.port)
	}
	lc := net.ListenConfig{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, "lo")
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), network, addr)
	if errors.Is(err, unix.EADDRINUSE) {
		return nil, fmt.Errorf("sockets: shared listener on port %d: the port is taken on some local address (another program, or another hub on this machine: give each hub its own pool.port_base): %w", key.port, err)
	}
	if err != nil {
		return nil, fmt.Errorf("sockets: shared listener on port %d: %w", key.port, err)
	}
	return ln, nil
}

// reset closes c with a TCP reset: no protected socket has that address now.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
