package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/frontdoor"
	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/hubfind"
	"github.com/iotsafe/iotsafe/internal/logging"
	"github.com/iotsafe/iotsafe/internal/memrelease"
	"github.com/iotsafe/iotsafe/internal/metrics"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/strictyaml"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/wsapi"
	yaml "go.yaml.in/yaml/v3"
)

// DefaultData is the data folder used when neither --data nor IOTSAFE_DATA is given.
const DefaultData = hubfind.Default

// ConfigName is the config file looked for in the data folder when --config is not given.
const ConfigName = "hub.yaml"

// Config is the hub's configuration file. Every field has a safe zero value.
type Config struct {
	Log     logging.Config `yaml:"log"`
	SSH     sshd.Config    `yaml:"ssh"`
	Pool    sockets.Config `yaml:"pool"`
	Admin   AdminConfig    `yaml:"admin"`
	Metrics metrics.Config `yaml:"metrics"`
	Access  AccessConfig   `yaml:"access"`
	// Frontdoor is the HTTPS entrance for people (TesPX); off unless listen is set.
	Frontdoor frontdoor.Config `yaml:"frontdoor"`
	// Audit bounds the audit log kept in the registry.
	Audit AuditConfig `yaml:"audit"`
	// REST is the DeviceHive-compatible telemetry API (paper 004): on the front door at
	// /api/rest, and on a plain loopback listener for devices' direct aliases.
	REST restapi.Config `yaml:"rest"`
	// JWT signs the API's tokens.
	JWT authn.Config `yaml:"jwt"`
	// Telemetry bounds the notification store.
	Telemetry telemetry.Config `yaml:"telemetry"`
	// MQTT is the hub's broker (paper 002's site broker); off unless a listener is set.
	MQTT mqttbroker.Config `yaml:"mqtt"`
	// SOAP is the endpoint for SOAP device messages with compact WS-Security (paper
	// 001); off unless enabled.
	SOAP soap.Config `yaml:"soap"`
	// WebSocket is DeviceHive's WebSocket API, served wherever the REST API is unless
	// turned off.
	WebSocket wsapi.Config `yaml:"websocket"`
	// Upstream makes the hub a gateway that relays its devices to a central hub.
	Upstream UpstreamConfig `yaml:"upstream"`
	// Registry says where the registry is kept: SQLite in the data folder unless a
	// PostgreSQL DSN is given.
	Registry RegistryConfig `yaml:"registry"`
	// Memory: the hub gives a burst's memory back to the system once it is quiet.
	Memory memrelease.Config `yaml:"memory"`
	// Source says where the configuration came from, for the start-up log; set by
	// LoadConfig.
	Source string `yaml:"-"`
	// File is the absolute path of the file LoadConfig read ('' for defaults or a
	// configuration built in memory): the running hub reports it, so an admin command
	// reads the same file without being told.
	File string `yaml:"-"`
}

// AdminConfig of the admin socket.
type AdminConfig struct {
	// Group may use the admin socket besides root and the hub's user; "" means nobody else.
	Group string `yaml:"group"`
}

// RegistryConfig places the registry.
type RegistryConfig struct {
	// DSN, if set, keeps the registry in PostgreSQL (postgres://user@host:5432/db?...).
	// Keep its password out of this file: ?passfile=/path (a .pgpass file, mode 0600),
	// PGPASSFILE or ~/.pgpass, as psql does.
	DSN string `yaml:"dsn"`
	// HubName names this hub among the hubs sharing a PostgreSQL registry: its lease,
	// the sessions it holds and the events it writes carry it; "" means the machine's
	// short host name.
	HubName string `yaml:"hub_name"`
	// PeerAddress is where the other hubs of a shared registry reach this hub's SSH
	// server (host:port, published in the registry); "" means they cannot, and devices
	// this hub holds are reachable here only. Needs pool.shared_listeners.
	PeerAddress string `yaml:"peer_address"`
}

// hubNameRE is what a hub name may be: it appears in logs, events and leases.
var hubNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// HubName is this hub's name on its registry (registry.hub_name, or the host name).
func (c *Config) HubName() string {
	if c.Registry.HubName != "" {
		return c.Registry.HubName
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(strings.ToLower(host), ".")
	if !hubNameRE.MatchString(host) {
		return "hub"
	}
	return host
}

// RegistryLocation is what registry.Open takes: the DSN if one is configured, else
// the data folder.
func (c *Config) RegistryLocation(dataDir string) string {
	if c.Registry.DSN != "" {
		return c.Registry.DSN
	}
	return dataDir
}

func (c RegistryConfig) validate() error {
	if c.HubName != "" && !hubNameRE.MatchString(c.HubName) {
		return fmt.Errorf("registry.hub_name: %q must be 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", c.HubName)
	}
	if c.PeerAddress != "" {
		if c.DSN == "" {
			return errors.New("registry.peer_address: peers share a PostgreSQL registry: set registry.dsn too")
		}
		if err := hostport.Dial(c.PeerAddress); err != nil {
			return fmt.Errorf("registry.peer_address: %v", err)
		}
	}
	if c.DSN == "" {
		return nil
	}
	if !sqldb.IsDSN(c.DSN) {
		return errors.New("registry.dsn: must be a postgres:// URL (postgres://user@host:5432/database); leave it out to keep the registry in the data folder")
	}
	if _, err := url.Parse(c.DSN); err != nil {
		return fmt.Errorf("registry.dsn: not a valid URL (%s)", sqldb.Redact(c.DSN))
	}
	return nil
}

// InlinePassword reports whether the DSN carries its password, in its user part or as a
// password parameter (the hub warns, and refuses a config file others can read).
func (c RegistryConfig) InlinePassword() bool {
	u, err := url.Parse(c.DSN)
	if err != nil {
		return false
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			return true
		}
	}
	return u.Query().Has("password")
}

// checkSecretFile refuses a config file that holds a password other local users can
// read: the data folder's hub.yaml has a well-known name in a folder anyone may traverse.
func checkSecretFile(path string, c Config) error {
	if !c.Registry.InlinePassword() {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s holds registry.dsn's password and other users can read it (mode %s): chmod 600 %s, or keep the password in a passfile (?passfile=/path/to/pgpass, mode 0600)",
			ErrConfig, path, perm, path)
	}
	return nil
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("config")

// ParseConfig reads YAML, rejecting unknown fields, and validates it with defaults applied.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := strictyaml.Decode(data, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c.ApplyDefaults()
	if _, err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return c, nil
}

// LoadConfig reads path; an empty path means DATA/hub.yaml if it exists, else defaults.
func LoadConfig(path, dataDir string) (Config, error) {
	explicit := path != ""
	if !explicit {
		path = filepath.Join(dataDir, ConfigName)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		c, err := ParseConfig(nil)
		c.Source = "none (" + path + " does not exist): using defaults"
		return c, err
	}
	if err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkSecretFile(path, c); err != nil {
		return Config{}, err
	}
	c.Source = path
	c.File, _ = filepath.Abs(path)
	var top map[string]any
	if yaml.Unmarshal(b, &top) == nil && len(top) == 0 {
		c.Source = path + " holds no settings (empty or only comments): using defaults"
	}
	return c, nil
}

// AuditConfig is the retention of the audit log. Pruning runs at start and hourly.
type AuditConfig struct {
	// MinFreeMiB is the free space the data folder's filesystem must keep: below it new
	// enrolments are refused (revocations and the audit log keep working) and the hub
	// warns hourly; 0 means 64.
	MinFreeMiB int `yaml:"min_free_mib"`
	// MaxEvents keeps at most this many of the newest events; 0 means 1,000,000 (about
	// 200 MB of registry).
	MaxEvents int `yaml:"max_events"`
	// Retention deletes events older than this; 0 means 2160h (90 days).
	Retention time.Duration `yaml:"retention"`
}

// ApplyDefaults fills zero values.
func (c *AuditConfig) ApplyDefaults() {
	if c.MaxEvents == 0 {
		c.MaxEvents = 1_000_000
	}
	if c.MinFreeMiB == 0 {
		c.MinFreeMiB = 64
	}
	if c.Retention == 0 {
		c.Retention = 90 * 24 * time.Hour
	}
}

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults() {
	c.Audit.ApplyDefaults()
	c.SSH.ApplyDefaults()
	c.Frontdoor.ApplyDefaults()
	c.REST.ApplyDefaults()
	c.JWT.ApplyDefaults()
	c.Telemetry.ApplyDefaults()
	c.MQTT.ApplyDefaults()
	c.WebSocket.ApplyDefaults()
	c.Upstream.applyDefaults()
}

// TelemetryEnabled reports whether any telemetry path is configured: the plain REST
// listener, the front door (which carries the API unless rest.frontdoor is off), or the
// MQTT broker, or the SOAP endpoint.
func (c *Config) TelemetryEnabled() bool {
	return c.restServed() || anyTransport(*c)
}

// restServed reports whether the REST API has a listener: rest.listen, or the front
// door unless rest.frontdoor is off.
func (c *Config) restServed() bool {
	return c.REST.Listen != "" || c.Frontdoor.Enabled() && c.REST.OnFrontdoor()
}

// Validate checks all sections and returns insecure algorithms that are enabled.
func (c *Config) Validate() ([]string, error) {
	if err := c.Log.Validate(); err != nil {
		return nil, err
	}
	if err := c.Upstream.validate(); err != nil {
		return nil, err
	}
	if err := c.Registry.validate(); err != nil {
		return nil, err
	}
	if c.Registry.PeerAddress != "" && !c.Pool.SharedListeners {
		return nil, errors.New("registry.peer_address: reaching the devices of other hubs needs pool.shared_listeners: true (this hub answers on every pool address)")
	}
	var insecure []string
	if c.Audit.MinFreeMiB < 0 {
		return nil, fmt.Errorf("audit.min_free_mib: must not be negative")
	}
	if c.Audit.MaxEvents < 1000 || c.Audit.Retention < time.Hour {
		return nil, fmt.Errorf("audit: max_events must be at least 1000 and retention at least 1h (got %d, %s)", c.Audit.MaxEvents, c.Audit.Retention)
	}
	if err := c.Access.validate(); err != nil {
		return nil, err
	}
	if err := c.Frontdoor.Validate(); err != nil {
		return nil, err
	}
	if c.Metrics.Listen != "" {
		if err := hostport.Listen(c.Metrics.Listen); err != nil {
			return nil, fmt.Errorf("metrics.listen: %v", err)
		}
	}
	if c.Frontdoor.Enabled() {
		weak, _ := c.Frontdoor.TLS.Check("frontdoor.tls") // checked by Validate
		for _, w := range weak {
			insecure = append(insecure, "frontdoor.tls: "+w)
		}
	}
	if err := c.REST.Validate(); err != nil {
		return nil, err
	}
	if err := c.Telemetry.Validate(); err != nil {
		return nil, err
	}
	weakMQTT, err := c.MQTT.Validate(c.Frontdoor.Enabled())
	if err != nil {
		return nil, err
	}
	insecure = append(insecure, weakMQTT...)
	weakSOAP, err := c.SOAP.Validate()
	if err != nil {
		return nil, err
	}
	if c.SOAP.Enabled && !c.Frontdoor.Enabled() && c.REST.Listen == "" {
		return nil, errors.New("soap.enabled: the endpoint needs the front door or rest.listen (the plain listener devices reach over their SSH session) to be served on")
	}
	insecure = append(insecure, weakSOAP...)
	if err := c.WebSocket.Validate(); err != nil {
		return nil, err
	}
	if err := c.JWT.Validate(); err != nil {
		return nil, err
	}
	if c.JWT.AllowUnsigned {
		insecure = append(insecure, "jwt.allow_unsigned: unsigned tokens verify while jwt.algorithm is none: anyone can forge them (for measuring only)")
	}
	if _, err := sockets.NewPool(c.Pool); err != nil {
		return nil, err
	}
	weak, err := c.SSH.Validate()
	if err != nil {
		return nil, err
	}
	for _, w := range weak {
		insecure = append(insecure, "ssh: "+w)
	}
	return insecure, nil
}

// MarshalConfig writes c as hub.yaml: what ParseConfig reads back to c (with defaults
// applied, every default is written out). The lab writes its hubs' configuration with
// it; Source is not written.
func MarshalConfig(c Config) ([]byte, error) {
	c.Source, c.File = "", ""
	return yaml.Marshal(c)
}
