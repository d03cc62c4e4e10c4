package wsapi

import (
	"errors"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/bytesize"
)

// Path is where the API is served on each listener that carries the REST API.
const Path = "/api/websocket"

// Config of the API (hub.yaml "websocket:").
type Config struct {
	// Enabled is "on" (the default, also for ""): served wherever the REST API is (the
	// front door, rest.listen); or "off".
	Enabled string `yaml:"enabled"`
	// MaxSockets bounds the sockets open at once; 0 means 10000.
	MaxSockets int `yaml:"max_sockets"`
	// MaxUnauthenticatedPerAddress bounds the sockets one source address holds that have
	// not authenticated yet; 0 means 16.
	MaxUnauthenticatedPerAddress int `yaml:"max_unauthenticated_per_address"`
	// AuthTimeout is how long a socket may stay without authenticating; 0 means 10s.
	AuthTimeout time.Duration `yaml:"auth_timeout"`
	// MaxSocketsPerDevice and MaxSocketsPerAccount bound what one caller holds; 0 means
	// 4 and 100.
	MaxSocketsPerDevice  int `yaml:"max_sockets_per_device"`
	MaxSocketsPerAccount int `yaml:"max_sockets_per_account"`
	// MaxSubscriptions bounds one socket's subscriptions; 0 means 16. Each also holds one
	// of the REST API's poll places (rest.max_polls_per_device, _per_account).
	MaxSubscriptions int `yaml:"max_subscriptions"`
	// MaxMessage bounds a message from a client; 0 means 128KiB.
	MaxMessage bytesize.Size `yaml:"max_message"`
	// WriteTimeout bounds the writing of one message to a socket; a socket that does not
	// take it in time (its client does not read) is closed. 0 means 10s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// PingInterval is how often the hub pings a quiet socket; one that answers nothing
	// for two intervals is closed. 0 means 30s.
	PingInterval time.Duration `yaml:"ping_interval"`
}

// On reports whether the API is served.
func (c *Config) On() bool { return c.Enabled != "off" }

// ApplyDefaults fills zero fields.
func (c *Config) ApplyDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxSockets, 10000)
	def(&c.MaxUnauthenticatedPerAddress, 16)
	def(&c.MaxSocketsPerDevice, 4)
	def(&c.MaxSocketsPerAccount, 100)
	def(&c.MaxSubscriptions, 16)
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 10 * time.Second
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = 128 << 10
	}
	if c.PingInterval == 0 {
		c.PingInterval = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
}

// Validate checks the config.
func (c *Config) Validate() error {
	switch c.Enabled {
	case "", "on", "off":
	default:
		return fmt.Errorf("websocket.enabled: %q is not one of on, off", c.Enabled)
	}
	if c.MaxSockets < 0 || c.MaxUnauthenticatedPerAddress < 0 || c.MaxSocketsPerDevice < 0 ||
		c.MaxSocketsPerAccount < 0 || c.MaxSubscriptions < 0 || c.MaxMessage < 0 {
		return errors.New("websocket: the max_ limits must not be negative")
	}
	if c.AuthTimeout < 0 || c.WriteTimeout < 0 || c.PingInterval < 0 || c.PingInterval > 0 && c.PingInterval < time.Second {
		return errors.New("websocket: auth_timeout and write_timeout must not be negative; ping_interval must be at least 1s")
	}
	return nil
}
