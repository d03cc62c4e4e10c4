package deviceconn

import (
	"net"
	"net/netip"
	"sync"
)

// Services is the hub's table of its own device listeners, by the TCP address each
// stands beside: a profile's direct target that names one of them is served in process.
// The zero value is empty and ready; a nil *Services finds nothing.
type Services struct {
	mu     sync.RWMutex
	byAddr map[netip.AddrPort]*Listener
}

// Add serves l's address in process from now on.
func (s *Services) Add(l *Listener) {
	ap, ok := addrPort(l.Addr())
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byAddr == nil {
		s.byAddr = map[netip.AddrPort]*Listener{}
	}
	s.byAddr[ap] = l
}

// Remove forgets l (its server stopped).
func (s *Services) Remove(l *Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ap, x := range s.byAddr {
		if x == l {
			delete(s.byAddr, ap)
		}
	}
}

// Lookup is the listener a direct target ("127.0.0.1:8080", "localhost:1883") names, or
// nil. A listener on an unspecified address (0.0.0.0) is named by any loopback address.
func (s *Services) Lookup(target string) *Listener {
	if s == nil {
		return nil
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(host, port))
	if err != nil {
		return nil
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	s.mu.RLock()
	defer s.mu.RUnlock()
	if l, ok := s.byAddr[ap]; ok {
		return l
	}
	if !ap.Addr().IsLoopback() {
		return nil
	}
	for _, unspec := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		if l, ok := s.byAddr[netip.AddrPortFrom(unspec, ap.Port())]; ok {
			return l
		}
	}
	return nil
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}
