package frontdoor

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/net/publicsuffix"

	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// Config of the front door. Listen "" leaves it off.
type Config struct {
	// Listen is the HTTPS address, e.g. 127.0.0.1:8443; "" means no front door.
	Listen string `yaml:"listen"`
	// Domain is the wildcard DNS name: DEVICE.DOMAIN and ALIAS.DEVICE.DOMAIN route to devices,
	// DOMAIN itself serves the login page and the list of a user's devices.
	Domain string `yaml:"domain"`
	// Cert and Key are PEM files of an operator's certificate; both "" means the local CA
	// in DATA/frontdoor issues certificates. The files are re-read when they change.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// TLS is the listener's TLS policy: versions, TLS 1.2 suites, groups, session
	// tickets (package tlspolicy; the zero value is the safe default).
	TLS tlspolicy.Policy `yaml:"tls"`
	// HSTS sends Strict-Transport-Security (one year, subdomains included: every name
	// under the domain is the front door's) so browsers never try plain HTTP; nil means
	// on.
	HSTS *bool `yaml:"hsts"`
	// MaxBody bounds request bodies; 0 means 10 MiB. Routes may change it per alias.
	MaxBody Size `yaml:"max_body"`
	// ResponseTimeout bounds the wait for a device's response headers; 0 means 30s.
	ResponseTimeout time.Duration `yaml:"response_timeout"`
	// Routes change limits per alias (e.g. a camera alias with large uploads).
	Routes []Route `yaml:"routes"`
	// ReadHeaderTimeout bounds reading a request's headers (slowloris); 0 means 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes idle keep-alive connections; 0 means 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxConns bounds concurrent client connections; 0 means 4096.
	MaxConns int `yaml:"max_conns"`
	// MaxConnsPerAddress bounds the connections one client address holds at once, so
	// one address (a slowloris) cannot take them all; 0 means 64.
	MaxConnsPerAddress int `yaml:"max_conns_per_address"`
	// Console serves the operator console at https://DOMAIN/console/ (internal/console);
	// nil means on. Accounts reach it once granted +view, +operate or +admin.
	Console *bool `yaml:"console"`
	// SessionTTL is how long a login-page session lasts; 0 means 12h.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// MaxFailedLogins per client address and per account within LoginWindow before
	// further attempts get 429; 0 means 10 and 5m.
	MaxFailedLogins int           `yaml:"max_failed_logins"`
	LoginWindow     time.Duration `yaml:"login_window"`
	// AccessLog is which requests get an access-log line: AccessLogAll (also ""),
	// AccessLogErrors (refusals and answers of 400 or more) or AccessLogOff.
	AccessLog string `yaml:"access_log"`
}

// Values of Config.AccessLog. A fleet posting telemetry through the front door makes
// one line per notification (12,800 devices at one a second: 12,800 lines a second);
// "errors" keeps what an operator looks for and drops the rest.
const (
	AccessLogAll    = "all"
	AccessLogErrors = "errors"
	AccessLogOff    = "off"
)

// Route holds per-alias limits.
type Route struct {
	Alias           string        `yaml:"alias"`
	MaxBody         Size          `yaml:"max_body"`
	ResponseTimeout time.Duration `yaml:"response_timeout"`
}

// hsts reports whether responses carry Strict-Transport-Security.
func (c Config) hsts() bool { return c.HSTS == nil || *c.HSTS }

// hstsValue is the Strict-Transport-Security header the front door sends.
const hstsValue = "max-age=31536000; includeSubDomains"

// Enabled reports whether a front door is configured.
func (c Config) Enabled() bool { return c.Listen != "" }

// ConsoleOn reports whether the front door serves the operator console.
func (c Config) ConsoleOn() bool { return c.Enabled() && (c.Console == nil || *c.Console) }

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults() {
	c.Domain = strings.ToLower(strings.TrimSuffix(c.Domain, "."))
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ResponseTimeout, 30*time.Second)
	def(&c.ReadHeaderTimeout, 10*time.Second)
	def(&c.IdleTimeout, 2*time.Minute)
	def(&c.SessionTTL, 12*time.Hour)
	def(&c.LoginWindow, 5*time.Minute)
	if c.MaxBody == 0 {
		c.MaxBody = 10 << 20
	}
	if c.MaxConnsPerAddress == 0 {
		c.MaxConnsPerAddress = 64
	}
	if c.MaxConns == 0 {
		c.MaxConns = 4096
	}
	if c.MaxFailedLogins == 0 {
		c.MaxFailedLogins = 10
	}
	if c.AccessLog == "" {
		c.AccessLog = AccessLogAll
	}
}

// Validate checks a config after ApplyDefaults.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if err := hostport.Listen(c.Listen); err != nil {
		return fmt.Errorf("frontdoor.listen: %v", err)
	}
	if err := validDomain(c.Domain); err != nil {
		return fmt.Errorf("frontdoor.domain: %v", err)
	}
	if (c.Cert == "") != (c.Key == "") {
		return fmt.Errorf("frontdoor: give both cert and key, or neither (local CA)")
	}
	if _, err := c.TLS.Check("frontdoor.tls"); err != nil {
		return err
	}
	switch c.AccessLog {
	case AccessLogAll, AccessLogErrors, AccessLogOff:
	default:
		return fmt.Errorf("frontdoor.access_log: %q is not one of %s, %s, %s", c.AccessLog, AccessLogAll, AccessLogErrors, AccessLogOff)
	}
	if c.MaxBody < 0 || c.MaxConns < 0 || c.MaxConnsPerAddress < 0 || c.MaxFailedLogins < 0 {
		return fmt.Errorf("frontdoor: limits must not be negative")
	}
	seen := map[string]bool{}
	for i, r := range c.Routes {
		if !profile.ValidName(r.Alias) {
			return fmt.Errorf("frontdoor.routes[%d].alias: %q is not an alias name", i, r.Alias)
		}
		if seen[r.Alias] {
			return fmt.Errorf("frontdoor.routes[%d]: alias %s listed twice", i, r.Alias)
		}
		seen[r.Alias] = true
		if r.MaxBody < 0 || r.ResponseTimeout < 0 {
			return fmt.Errorf("frontdoor.routes[%d]: limits must not be negative", i)
		}
	}
	return nil
}

// limits returns the body limit and response timeout for alias.
func (c Config) limits(alias string) (int64, time.Duration) {
	body, timeout := int64(c.MaxBody), c.ResponseTimeout
	for _, r := range c.Routes {
		if r.Alias == alias {
			if r.MaxBody > 0 {
				body = int64(r.MaxBody)
			}
			if r.ResponseTimeout > 0 {
				timeout = r.ResponseTimeout
			}
		}
	}
	return body, timeout
}

func validDomain(d string) error {
	if d == "" {
		return fmt.Errorf("required with listen (the wildcard DNS name, e.g. devices.example.com)")
	}
	if len(d) > 200 {
		return fmt.Errorf("%q is too long", d)
	}
	for _, l := range strings.Split(d, ".") {
		if !validLabel(l) {
			return fmt.Errorf("%q: each label needs letters, digits or '-', not at either end", d)
		}
	}
	// The local CA is name-constrained to this domain: a public suffix ("com", "co.uk")
	// or a single label would let it issue certificates for other people's names.
	if !strings.Contains(d, ".") {
		return fmt.Errorf("%q is a single label: use a domain of your own, e.g. devices.example.com", d)
	}
	if ps, _ := publicsuffix.PublicSuffix(d); ps == d {
		return fmt.Errorf("%q is a public suffix, shared by many owners: use a domain of your own below it, e.g. devices.example.%s", d, d)
	}
	return nil
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Size is a byte count as written in hub.yaml (bytesize.Size).
type Size = bytesize.Size
