package sockets

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Defaults of the reserved pool.
const (
	DefaultCIDR     = "127.77.0.0/16"
	DefaultPortBase = 10000
)

// ErrExhausted means every address (or port) of the pool is taken.
var ErrExhausted = errors.New("sockets: pool exhausted")

// Config describes the reserved pool (part of the paper's HostProfile).
type Config struct {
	// CIDR is the reserved range; "" means 127.77.0.0/16. An IPv6 prefix works too once it
	// is routed locally: `ip -6 route add local PREFIX dev lo` (see Listen).
	CIDR string `yaml:"cidr" json:"cidr"`
	// PortBase is the first port given to a device's reverse aliases; 0 means 10000. A
	// device (a gateway, say) may have up to 65536-PortBase aliases.
	PortBase int `yaml:"port_base" json:"port_base"`
	// SharedListeners serves every protected socket through one listener per port of
	// the pool instead of one per socket, so the hub's descriptors do not grow with its
	// devices (see Shared). Off by default: each port is then taken on every local
	// address, so two hubs on one machine need different port_base values.
	SharedListeners bool `yaml:"shared_listeners" json:"shared_listeners,omitempty"`
}

// Pool allocates from the reserved range. It holds no state: the registry records what
// is taken and passes it in, so allocations survive restarts and several hubs agree.
type Pool struct {
	prefix   netip.Prefix
	portBase int
}

// NewPool validates cfg and applies defaults.
func NewPool(cfg Config) (*Pool, error) {
	if cfg.CIDR == "" {
		cfg.CIDR = DefaultCIDR
	}
	if cfg.PortBase == 0 {
		cfg.PortBase = DefaultPortBase
	}
	pfx, err := netip.ParsePrefix(cfg.CIDR)
	if err != nil {
		return nil, fmt.Errorf("sockets: pool.cidr: %w", err)
	}
	pfx = pfx.Masked()
	if pfx.Addr().Is4() && pfx.Bits() > 30 || pfx.Addr().Is6() && pfx.Bits() > 126 {
		return nil, fmt.Errorf("sockets: pool.cidr %s: too small, need at least 2 usable addresses", pfx)
	}
	if err := checkRange(pfx); err != nil {
		return nil, err
	}
	if err := checkHostAddresses(pfx); err != nil {
		return nil, err
	}
	if cfg.PortBase < 1024 || cfg.PortBase > 65535 {
		return nil, fmt.Errorf("sockets: pool.port_base %d: want 1024-65535", cfg.PortBase)
	}
	return &Pool{prefix: pfx, portBase: cfg.PortBase}, nil
}

// hostLoopback holds what a host itself uses of 127.0.0.0/8: 127.0.0.1, systemd-resolved's
// 127.0.0.53 and Debian's 127.0.1.1 for its own name. A pool must stay clear of it: the
// kernel layer confines every pool address to its device's permitted users.
var hostLoopback = netip.MustParsePrefix("127.0.0.0/16")

// checkRange allows only ranges that cannot hold addresses the host already uses: IPv4
// inside loopback (not all of it, nor the part the host uses), IPv6 of a sane size that
// the operator routes locally (ip -6 route add local PREFIX dev lo).
func checkRange(p netip.Prefix) error {
	loop4 := netip.MustParsePrefix("127.0.0.0/8")
	switch {
	case p.Addr().Is4() && !(loop4.Contains(p.Addr()) && p.Bits() > 8):
		return fmt.Errorf("sockets: pool.cidr %s: an IPv4 pool must be a part of loopback 127.0.0.0/8, smaller than all of it (the default is %s)", p, DefaultCIDR)
	case p.Addr().Is4() && p.Overlaps(hostLoopback):
		return fmt.Errorf("sockets: pool.cidr %s: overlaps %s, where the host's own loopback services live (127.0.0.1, 127.0.0.53, 127.0.1.1); choose a range such as %s", p, hostLoopback, DefaultCIDR)
	case p.Addr().Is6() && p.Addr().Is4In6():
		return fmt.Errorf("sockets: pool.cidr %s: write an IPv4 pool in IPv4 form", p)
	case p.Addr().Is6() && p.Bits() < 48:
		return fmt.Errorf("sockets: pool.cidr %s: too large for an IPv6 pool (at most /48), and it must be routed locally", p)
	case p.Addr().Is6() && (p.Contains(netip.IPv6Loopback()) || !p.Addr().IsPrivate()):
		return fmt.Errorf("sockets: pool.cidr %s: an IPv6 pool must be a unique local range (fc00::/7) routed to lo", p)
	}
	return nil
}

// checkHostAddresses refuses a pool that holds an address assigned to one of the host's
// interfaces: such an address is the host's, not a device's.
func checkHostAddresses(p netip.Prefix) error {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil // nothing to compare with; the range checks still hold
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if ok && p.Contains(ip.Unmap()) {
			return fmt.Errorf("sockets: pool.cidr %s: holds %s, an address assigned to one of this host's interfaces", p, ip.Unmap())
		}
	}
	return nil
}

// Config returns the pool's settings with defaults applied (what the registry records).
func (p *Pool) Config() Config { return Config{CIDR: p.prefix.String(), PortBase: p.portBase} }

// Prefix returns the reserved range.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// Contains reports whether a is a protected address.
func (p *Pool) Contains(a netip.Addr) bool { return p.prefix.Contains(a.Unmap()) }

// NextAddress returns the lowest address of the pool that is not taken. The network
// address and (for IPv4) the last address are never handed out.
func (p *Pool) NextAddress(taken func(netip.Addr) bool) (netip.Addr, error) {
	a := p.prefix.Addr().Next()
	for ; a.IsValid() && p.prefix.Contains(a); a = a.Next() {
		if a.Is4() && !p.prefix.Contains(a.Next()) {
			break // broadcast-like last address
		}
		if !taken(a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %s", ErrExhausted, p.prefix)
}

// NextAddressFrom is NextAddress starting at from (wrapping around to the start of the
// pool once), for callers that know where the last allocation went: asking the registry
// whether one address is taken is cheap, reading every taken address is not at 100,000
// devices. An invalid from, or one outside the pool, starts at the beginning.
func (p *Pool) NextAddressFrom(from netip.Addr, taken func(netip.Addr) bool) (netip.Addr, error) {
	if !from.IsValid() || !p.prefix.Contains(from) {
		return p.NextAddress(taken)
	}
	for a := from; a.IsValid() && p.prefix.Contains(a); a = a.Next() {
		if a == p.prefix.Addr() || a.Is4() && !p.prefix.Contains(a.Next()) {
			continue // the network address, the broadcast-like last address
		}
		if !taken(a) {
			return a, nil
		}
	}
	return p.NextAddress(taken)
}

// NextPort returns the lowest alias port on one device address that is not taken.
func (p *Pool) NextPort(taken func(int) bool) (int, error) { return p.NextPortFrom(0, taken) }

// NextPortFrom is NextPort for callers that know every port below from is taken (they
// allocate many aliases in a row): the search starts there, so n allocations cost n
// steps instead of n*n/2.
func (p *Pool) NextPortFrom(from int, taken func(int) bool) (int, error) {
	for port := max(from, p.portBase); port <= 65535; port++ {
		if !taken(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("%w: no free port from %d", ErrExhausted, p.portBase)
}
