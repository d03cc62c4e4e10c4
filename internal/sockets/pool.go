package sockets

import (
	"errors"
	"fmt"
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
	if cfg.PortBase < 1024 || cfg.PortBase > 65535 {
		return nil, fmt.Errorf("sockets: pool.port_base %d: want 1024-65535", cfg.PortBase)
	}
	return &Pool{prefix: pfx, portBase: cfg.PortBase}, nil
}

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

// NextPort returns the lowest alias port on one device address that is not taken.
func (p *Pool) NextPort(taken func(int) bool) (int, error) {
	for port := p.portBase; port <= 65535; port++ {
		if !taken(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("%w: no free port from %d", ErrExhausted, p.portBase)
}
