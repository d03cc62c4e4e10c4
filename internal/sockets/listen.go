package sockets

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// freebind lets an IPv6 socket bind a pool address that is local only through a route
// (ip -6 route add local PREFIX dev lo): Linux binds such addresses only when assigned,
// unlike IPv4's 127.0.0.0/8. Traffic still loops back through the local route.
func freebind(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr().Is6() && !ap.Addr().Is4In6() {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Listen binds a protected socket. Its clients are local processes, so accepted
// connections get no TCP keepalive (Go would set it with four system calls each).
func Listen(ctx context.Context, a netip.AddrPort) (net.Listener, error) {
	lc := net.ListenConfig{Control: freebind, KeepAlive: -1}
	return lc.Listen(ctx, "tcp", a.String())
}

// Dialer connects from a device's pool address (the source of its direct forwards).
func Dialer(src netip.Addr, timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Control: freebind}
}
