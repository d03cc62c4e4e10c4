package hostport

import (
	"fmt"
	"net"
	"strconv"
)

// Listen checks a listen address: host:port, the host empty (every interface), an IP or
// a name, the port a number from 0 (any free port) to 65535.
func Listen(addr string) error { return check(addr, 0) }

// Dial checks an address to connect to: host:port with a host and a port from 1 to
// 65535.
func Dial(addr string) error {
	if err := check(addr, 1); err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(addr); host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	return nil
}

func check(addr string, minPort int) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	// A number, not a service name: a name's port depends on the machine's
	// /etc/services, and a typo would pass here and fail at the start.
	n, err := strconv.Atoi(port)
	if err != nil || n < minPort || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("%q: the port %q is not a number from %d to 65535", addr, port, minPort)
	}
	return nil
}
