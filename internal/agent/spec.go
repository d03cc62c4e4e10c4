package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/iotsafe/iotsafe/internal/profile"
)

// Expose is a reverse forward: the hub's protected socket for Alias leads to Target on the device.
type Expose struct {
	Alias  string `yaml:"alias"`
	Target string `yaml:"target"` // host:port on the device, e.g. 127.0.0.1:80
}

// Forward is a direct forward: connections to Listen on the device reach the hub's
// direct alias Alias.
type Forward struct {
	Listen string `yaml:"listen"` // host:port on the device, e.g. 127.0.0.1:1883
	Alias  string `yaml:"alias"`
}

// ErrSpec is wrapped by every parse error of --expose and --forward.
var ErrSpec = errors.New("agent: bad forward spec")

// ParseExpose parses "ALIAS=HOST:PORT" (a bare PORT means 127.0.0.1:PORT).
func ParseExpose(s string) (Expose, error) {
	alias, target, ok := strings.Cut(s, "=")
	if !ok {
		return Expose{}, fmt.Errorf("%w: --expose %q: want ALIAS=HOST:PORT, e.g. http=127.0.0.1:80", ErrSpec, s)
	}
	if !profile.ValidName(alias) {
		return Expose{}, fmt.Errorf("%w: --expose %q: alias %q must be lower-case letters, digits and '-'", ErrSpec, s, alias)
	}
	t, err := hostPort(target)
	if err != nil {
		return Expose{}, fmt.Errorf("%w: --expose %q: %v", ErrSpec, s, err)
	}
	return Expose{Alias: alias, Target: t}, nil
}

// ParseForward parses "HOST:PORT=ALIAS" (a bare PORT means 127.0.0.1:PORT).
func ParseForward(s string) (Forward, error) {
	listen, alias, ok := strings.Cut(s, "=")
	if !ok {
		return Forward{}, fmt.Errorf("%w: --forward %q: want HOST:PORT=ALIAS, e.g. 127.0.0.1:1883=broker", ErrSpec, s)
	}
	if !profile.ValidName(alias) {
		return Forward{}, fmt.Errorf("%w: --forward %q: alias %q must be lower-case letters, digits and '-'", ErrSpec, s, alias)
	}
	l, err := hostPort(listen)
	if err != nil {
		return Forward{}, fmt.Errorf("%w: --forward %q: %v", ErrSpec, s, err)
	}
	return Forward{Listen: l, Alias: alias}, nil
}

func hostPort(s string) (string, error) {
	if _, err := strconv.Atoi(s); err == nil {
		s = "127.0.0.1:" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("address %q: want HOST:PORT", s)
	}
	if host == "" {
		return "", fmt.Errorf("address %q: empty host", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q: port must be 1-65535", s)
	}
	return net.JoinHostPort(host, port), nil
}
