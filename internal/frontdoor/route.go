package frontdoor

import (
	"errors"
	"net"
	"strings"

	"github.com/iotsafe/iotsafe/internal/profile"
)

// DefaultAlias is the service DEVICE.DOMAIN reaches.
const DefaultAlias = "http"

// Target is where a host name points.
type Target struct {
	Portal bool // DOMAIN itself: login page and device list
	Device string
	Alias  string
}

// ErrUnknownHost is returned for names outside the front door's domain or not shaped
// like DEVICE.DOMAIN or ALIAS.DEVICE.DOMAIN.
var ErrUnknownHost = errors.New("unknown host name")

// ParseHost routes a Host header (or TLS server name) under domain. Host names are
// case-insensitive and may carry a port and a trailing dot; device and alias labels must
// be valid iotsafe names, so nothing else ever reaches a registry query.
func ParseHost(host, domain string) (Target, error) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if len(host) > 255 {
		return Target{}, ErrUnknownHost
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == domain {
		return Target{Portal: true}, nil
	}
	rest, ok := strings.CutSuffix(host, "."+domain)
	if !ok || rest == "" {
		return Target{}, ErrUnknownHost
	}
	alias, device, two := strings.Cut(rest, ".")
	if !two {
		alias, device = DefaultAlias, rest
	}
	if !profile.ValidName(device) || !profile.ValidName(alias) {
		return Target{}, ErrUnknownHost
	}
	return Target{Device: device, Alias: alias}, nil
}
