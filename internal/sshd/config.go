package sshd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Config of the device-facing SSH server. The zero value works: loopback only, modern
// algorithms, bounded everything.
type Config struct {
	// Listen is the address devices connect to; "" means 127.0.0.1:2222.
	Listen string `yaml:"listen"`
	// Crypto is the algorithm policy (the SSH part of the HostProfile).
	Crypto profile.CryptoPolicy `yaml:",inline"`
	// KeepaliveInterval is how often the hub asks each device whether it is alive; 0 means 15s.
	KeepaliveInterval time.Duration `yaml:"keepalive_interval"`
	// KeepaliveTimeout drops a session that has not answered for this long; 0 means 3 intervals.
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// TakeoverProbe is how long an existing session gets to prove it is alive when a new
	// session of the same device arrives at the limit; 0 means 3s.
	TakeoverProbe time.Duration `yaml:"takeover_probe"`
	// HandshakeTimeout bounds key exchange plus authentication; 0 means 10s.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// MaxHandshakes bounds concurrent unauthenticated connections from all sources; 0
	// means 512.
	MaxHandshakes int `yaml:"max_handshakes"`
	// PerSource bounds what one source address may cost before its devices authenticate:
	// concurrent handshakes, and how fast failed ones are forgiven (CVE-2002-20001,
	// "DHEat"). Connections over it wait their turn, so a fleet behind one NAT address
	// that reconnects at once gets in.
	PerSource throttle.Config `yaml:"per_source"`
	// MaxAuthTries bounds authentication attempts per connection; 0 means 3.
	MaxAuthTries int `yaml:"max_auth_tries"`
	// MaxRejectedChannels closes a connection after this many refused channel opens and
	// forward requests together (bounds memory, see CVE-2026-39827, and the audit log);
	// 0 means 32.
	MaxRejectedChannels int `yaml:"max_rejected_channels"`
	// ForwardMemoryMiB is the hub-wide memory budget for data buffered in forwarded
	// connections: each open one counts ChannelWorstCase (2.5 MiB), and new ones are
	// refused with a clear reason past the budget. 0 means half of the machine's memory.
	ForwardMemoryMiB int `yaml:"forward_memory_mib"`
	// DialTimeout bounds the hub's connection to a direct-forward target; 0 means 10s.
	DialTimeout time.Duration `yaml:"dial_timeout"`

	// Authorize, if set, decides each local connection to a protected socket before it is
	// forwarded to the device (the user-space access layer); an error closes it.
	Authorize func(c net.Conn, device, alias string) error `yaml:"-"`

	// SocketAllocated, if set, is called (in its own goroutine) when a forward made the
	// registry allocate a new protected socket, so the kernel layer can include it.
	SocketAllocated func() `yaml:"-"`
	// Shared, if set, serves the protected sockets through shared listeners (one per
	// port: pool.shared_listeners) instead of a listener each.
	Shared *sockets.Shared `yaml:"-"`
	// Relay, if set, is told whenever the aliases a device serves at this hub change (a
	// forward opened or closed, a session ended): a gateway's uplink announces them to
	// its centre. It is called without locks held and must not block; it reads the
	// current state back with Server.Serving.
	Relay func(device string) `yaml:"-"`
	// Telemetry, if set, stores the notifications gateways relay (server_telemetry.go);
	// nil refuses them.
	Telemetry TelemetrySink `yaml:"-"`
	// Services, if set, are the hub's own device listeners (REST, SOAP, MQTT): a direct
	// forward whose target is one of them is handed over in process with the session's
	// identity, never dialled from the device's pool address.
	Services *deviceconn.Services `yaml:"-"`
	// DevicesAdded, if set, is called after a gateway's announcement or relayed batch
	// recorded devices new to the registry, before the gateway is answered: the hub's
	// telemetry paths learn of them (their REST tokens, MQTT logins).
	DevicesAdded func() `yaml:"-"`

	// PeerHub, if set, admits other hubs of a shared registry: a client logging in as
	// sshext.PeerUserPrefix+NAME is the hub NAME if PeerHub accepts its key (the key it
	// published in the registry). A peer may only open sshext.PeerChannel channels to
	// devices whose sessions this hub holds; access was decided at the peer.
	PeerHub func(name string, key ssh.PublicKey) error `yaml:"-"`

	// Join, if set, enrols a device's own key with a join token (sshext.JoinUser): the
	// hub passes its change path. Nil: this hub takes no joins.
	Join func(ctx context.Context, token, name string, key ssh.PublicKey, remote string) (profile string, pending bool, err error) `yaml:"-"`

	// EnrolByCert, if set, enrols a device on its first connection with a certificate of
	// a manufacturer's CA (registry.SSHCA with a profile): the hub passes its change
	// path. Nil: such a certificate is refused until the device is enrolled otherwise.
	EnrolByCert func(ctx context.Context, caFP, name string, key ssh.PublicKey, keyID string, serial uint64, remote string) (pending bool, err error) `yaml:"-"`

	// HostCertificates are OpenSSH host certificates of the host keys: the server
	// presents each beside its key, so devices can trust the hub by its CA
	// (@cert-authority) instead of its key.
	HostCertificates []*ssh.Certificate `yaml:"-"`

	// Revoker revokes a device whose violations reached its profile's on_violation
	// limit: the hub passes its change path (internal/control), which writes the
	// registry and ends what the device holds on every path. Nil: a change path of the
	// server's own over its Store, which reaches this server's sessions only.
	Revoker Revoker `yaml:"-"`

	// Logger receives the server's structured logs; nil discards them.
	Logger *slog.Logger `yaml:"-"`
	// Metrics receives counters; nil discards them.
	Metrics Metrics `yaml:"-"`
}

// Revoker is the change path a violation revokes through (control.Control is one).
type Revoker interface {
	Revoke(ctx context.Context, device, reason string) (closed int, err error)
}

// DefaultListen is where the hub's SSH server listens unless configured.
const DefaultListen = "127.0.0.1:2222"

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	c.Crypto.ApplyDefaults()
	setDur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setDur(&c.KeepaliveInterval, 15*time.Second)
	setDur(&c.KeepaliveTimeout, 3*c.KeepaliveInterval)
	setDur(&c.TakeoverProbe, 3*time.Second)
	setDur(&c.HandshakeTimeout, 10*time.Second)
	setDur(&c.DialTimeout, 10*time.Second)
	setInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	setInt(&c.MaxHandshakes, 512)
	setInt(&c.MaxAuthTries, 3)
	setInt(&c.MaxRejectedChannels, 32)
	if c.ForwardMemoryMiB == 0 {
		c.ForwardMemoryMiB = defaultForwardMemoryMiB()
	}
	c.PerSource.ApplyDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
}

// Validate checks the configuration after defaults; it returns the insecure algorithms
// the operator enabled so the caller can warn.
func (c *Config) Validate() ([]string, error) {
	if err := hostport.Listen(c.Listen); err != nil {
		return nil, fmt.Errorf("sshd: ssh.listen: %v", err)
	}
	for name, d := range map[string]time.Duration{"keepalive_interval": c.KeepaliveInterval, "keepalive_timeout": c.KeepaliveTimeout,
		"takeover_probe": c.TakeoverProbe, "handshake_timeout": c.HandshakeTimeout, "dial_timeout": c.DialTimeout} {
		if d < 0 {
			return nil, fmt.Errorf("sshd: ssh.%s: must not be negative", name)
		}
	}
	for name, n := range map[string]int{"max_handshakes": c.MaxHandshakes, "max_auth_tries": c.MaxAuthTries, "max_rejected_channels": c.MaxRejectedChannels, "forward_memory_mib": c.ForwardMemoryMiB} {
		if n < 0 {
			return nil, fmt.Errorf("sshd: ssh.%s: must not be negative", name)
		}
	}
	if err := c.PerSource.Validate("ssh.per_source"); err != nil {
		return nil, err
	}
	return c.Crypto.Validate()
}
