package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/frontdoor"
	"github.com/iotsafe/iotsafe/internal/metrics"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// DefaultData is the data folder used when neither --data nor IOTSAFE_DATA is given.
const DefaultData = "./iotsafe-data"

// ConfigName is the config file looked for in the data folder when --config is not given.
const ConfigName = "hub.yaml"

// Config is the hub's configuration file. Every field has a safe zero value.
type Config struct {
	Log     LogConfig      `yaml:"log"`
	SSH     sshd.Config    `yaml:"ssh"`
	Pool    sockets.Config `yaml:"pool"`
	Admin   AdminConfig    `yaml:"admin"`
	Metrics metrics.Config `yaml:"metrics"`
	Access  AccessConfig   `yaml:"access"`
	// Frontdoor is the HTTPS entrance for people (TesPX); off unless listen is set.
	Frontdoor frontdoor.Config `yaml:"frontdoor"`
	// Source says where the configuration came from, for the start-up log; set by
	// LoadConfig.
	Source string `yaml:"-"`
}

// LogConfig selects the log level ("debug", "info", "warn", "error"; "" means info) and
// format ("text" or "json"; "" means text).
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// AdminConfig of the admin socket.
type AdminConfig struct {
	// Group may use the admin socket besides root and the hub's user; "" means nobody else.
	Group string `yaml:"group"`
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
	c.Source = path
	var top map[string]any
	if yaml.Unmarshal(b, &top) == nil && len(top) == 0 {
		c.Source = path + " holds no settings (empty or only comments): using defaults"
	}
	return c, nil
}

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults() {
	c.SSH.ApplyDefaults()
	c.Frontdoor.ApplyDefaults()
}

// Validate checks all sections and returns insecure algorithms that are enabled.
func (c *Config) Validate() ([]string, error) {
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "text", "json":
	default:
		return nil, fmt.Errorf("log.format: %q is not one of text, json", c.Log.Format)
	}
	if err := c.Access.validate(); err != nil {
		return nil, err
	}
	if err := c.Frontdoor.Validate(); err != nil {
		return nil, err
	}
	if _, err := sockets.NewPool(c.Pool); err != nil {
		return nil, err
	}
	return c.SSH.Validate()
}
