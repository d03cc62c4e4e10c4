package mqttbroker

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
	"github.com/iotsafe/iotsafe/internal/mqtttopic"
	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// Config is hub.yaml's mqtt section. With neither Listen nor TLSListen the broker is off.
type Config struct {
	// Listen is the plain listener, for devices whose MQTT comes over their SSH session
	// (a direct alias to it in the profile); loopback only.
	Listen string `yaml:"listen"`
	// TLSListen is the MQTT-over-TLS listener (devices log in with their name and
	// telemetry secret). Its certificate: Cert and Key, or else the front door's.
	TLSListen string           `yaml:"tls_listen"`
	TLS       tlspolicy.Policy `yaml:"tls"`
	Cert      string           `yaml:"cert"`
	Key       string           `yaml:"key"`
	// Store are topic filters whose messages are also stored as notifications: the
	// notification's name is the topic after devices/NAME/notifications/ (or the last
	// level); its parameters the payload if it is JSON, else {"payload": "TEXT"}.
	// Default: devices/+/notifications/#. [] stores nothing.
	Store []string `yaml:"store"`
	// Persist keeps sessions (subscriptions of clients that asked for a persistent
	// session), QoS 1 and 2 messages in flight and retained messages in the data folder
	// (mqtt.db, 0600), so they survive a hub restart; nil means on.
	Persist *bool `yaml:"persist"`
	// MaxClients bounds concurrent clients; 0 means 10,000.
	MaxClients int `yaml:"max_clients"`
	// MaxPacket bounds a packet's size (256KiB, 1MiB); 0 means 256 KiB.
	MaxPacket bytesize.Size `yaml:"max_packet"`
	// MaxRefusals is how many refused topics one connection may have before the broker
	// disconnects it (each is a violation of the device's profile); 0 means 32.
	MaxRefusals int `yaml:"max_refusals"`
	// MaxPending bounds the packets waiting to be written to one client (messages to a
	// slow subscriber past it are dropped and counted); 0 means 256. The queue is
	// allocated whole, 8 bytes a slot, when a client is first sent something (the
	// patched mochi; a device that only publishes holds none): mochi's default of 8,192
	// was 64 KiB of each device's memory, 1,024 still 8 KiB (bench mqtt connections). A device
	// needs few; a platform app subscribed to a large fleet may need more (a burst to it
	// waits here while its socket is slow): raise it then.
	MaxPending int `yaml:"max_pending"`
	// ConnectTimeout bounds a new connection's TLS handshake and its CONNECT; 0 means 10s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxUnauthenticatedPerAddress bounds the connections one source address holds that
	// have not logged in yet; 0 means 64.
	MaxUnauthenticatedPerAddress int `yaml:"max_unauthenticated_per_address"`
	// MaxUnauthenticated bounds the connections not logged in yet, over all listeners;
	// 0 means 1024.
	MaxUnauthenticated int `yaml:"max_unauthenticated"`
	// Bridge connects the broker to a central broker (docs/mqtt.md, "Bridge").
	Bridge *mqttbridge.Config `yaml:"bridge"`
}

// persist reports whether session state is kept on disk.
func (c Config) persist() bool { return c.Persist == nil || *c.Persist }

// Persists reports whether session state is kept on disk (mqtt.persist).
func (c Config) Persists() bool { return c.persist() }

// Enabled reports whether a listener is configured.
func (c Config) Enabled() bool { return c.Listen != "" || c.TLSListen != "" }

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults() {
	if c.Store == nil {
		c.Store = []string{"devices/+/notifications/#"}
	}
	if c.MaxClients == 0 {
		c.MaxClients = 10000
	}
	if c.MaxPacket == 0 {
		c.MaxPacket = 256 << 10
	}
	if c.MaxRefusals == 0 {
		c.MaxRefusals = 32
	}
	if c.MaxPending == 0 {
		c.MaxPending = 256
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.MaxUnauthenticatedPerAddress == 0 {
		c.MaxUnauthenticatedPerAddress = 64
	}
	if c.MaxUnauthenticated == 0 {
		c.MaxUnauthenticated = 1024
	}
	if c.Bridge != nil {
		host, _ := os.Hostname()
		c.Bridge.ApplyDefaults(host)
	}
}

// Validate checks a config after ApplyDefaults; frontdoor says whether the front door
// (whose certificate a TLS listener without Cert uses) is on. It returns the insecure
// choices the operator let through, each as "SECTION: what" (mqtt.tls: TLS 1.0).
func (c Config) Validate(frontdoor bool) ([]string, error) {
	if !c.Enabled() {
		if c.Bridge != nil {
			return nil, fmt.Errorf("mqtt.bridge needs the broker: set mqtt.listen or mqtt.tls_listen")
		}
		return nil, nil
	}
	if c.Listen != "" {
		if err := hostport.Listen(c.Listen); err != nil {
			return nil, fmt.Errorf("mqtt.listen: %v", err)
		}
		host, _, _ := net.SplitHostPort(c.Listen)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("mqtt.listen: %q must be a loopback address: devices reach it over their SSH session, and only a device's SSH session is trusted there (use mqtt.tls_listen for other networks)", c.Listen)
		}
	}
	var weak []string
	if c.TLSListen != "" {
		if err := hostport.Listen(c.TLSListen); err != nil {
			return nil, fmt.Errorf("mqtt.tls_listen: %v", err)
		}
		if (c.Cert == "") != (c.Key == "") {
			return nil, fmt.Errorf("mqtt: give both cert and key, or neither (the front door's certificate)")
		}
		if c.Cert == "" && !frontdoor {
			return nil, fmt.Errorf("mqtt.tls_listen needs mqtt.cert and mqtt.key, or the front door (its certificate is then used)")
		}
		w, err := c.TLS.Check("mqtt.tls")
		if err != nil {
			return nil, err
		}
		for _, x := range w {
			weak = append(weak, "mqtt.tls: "+x)
		}
	}
	for i, f := range c.Store {
		if err := validFilter(f); err != nil {
			return nil, fmt.Errorf("mqtt.store[%d]: %q: %v", i, f, err)
		}
	}
	if c.Bridge != nil {
		bw, err := c.Bridge.Validate()
		if err != nil {
			return nil, err
		}
		weak = append(weak, bw...)
	}
	if c.MaxClients < 0 || c.MaxRefusals < 0 || c.MaxPacket < 0 || c.MaxPacket > 256<<20 {
		return nil, fmt.Errorf("mqtt: max_clients and max_refusals must not be negative and max_packet must be 0 to 256 MiB")
	}
	if c.ConnectTimeout < 0 || c.MaxUnauthenticatedPerAddress < 0 || c.MaxUnauthenticated < 0 {
		return nil, fmt.Errorf("mqtt: connect_timeout, max_unauthenticated_per_address and max_unauthenticated must not be negative")
	}
	if c.MaxPending < 0 || c.MaxPending > 1<<20 {
		return nil, fmt.Errorf("mqtt: max_pending must be 0 (1024) to 1048576")
	}
	return weak, nil
}

// validFilter checks a stored-topic filter: a well-formed filter under devices/.
func validFilter(f string) error {
	if err := mqtttopic.ValidFilter(f); err != nil {
		return err
	}
	if levels := strings.Split(f, "/"); len(levels) < 2 || levels[0] != "devices" {
		return fmt.Errorf("a filter of devices' topics must start with devices/")
	}
	return nil
}
