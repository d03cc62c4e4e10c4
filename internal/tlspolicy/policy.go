package tlspolicy

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Policy is a listener's TLS policy as hub.yaml writes it (e.g. `frontdoor: {tls: ...}`).
// The zero Policy is the safe default.
type Policy struct {
	// MinVersion and MaxVersion: "1.2" (the default minimum) or "1.3" (the default
	// maximum); "1.0" and "1.1" need AllowInsecure.
	MinVersion string `yaml:"min_version"`
	MaxVersion string `yaml:"max_version"`
	// Suites are the TLS 1.2 cipher suites, in order of preference, by OpenSSL or IANA
	// name; empty means the six ECDHE suites with AES-GCM or ChaCha20-Poly1305. Others
	// (CBC, SHA-1, RSA key exchange) need AllowInsecure. TLS 1.3's suites are not
	// configurable in Go: all three are always on.
	Suites []string `yaml:"suites"`
	// Groups are the key-exchange groups in order of preference: X25519MLKEM768, X25519,
	// P-256, P-384, P-521 (OpenSSL spellings such as prime256v1 too); empty means
	// DefaultGroups. [X25519] alone keeps a constrained device's ClientHello and
	// handshake small (no post-quantum key share).
	Groups []string `yaml:"groups"`
	// SessionTickets lets clients resume sessions without a full handshake (TLS 1.2 and
	// 1.3). nil means on.
	SessionTickets *bool `yaml:"session_tickets"`
	// TicketLifetime is how long a session ticket resumes a session, at most, and how
	// long the key that sealed it stays in memory (a key read out of memory opens the
	// TLS 1.2 sessions whose tickets it sealed); from a minute to 7 days (Go's own
	// bound), 0 means DefaultTicketLifetime.
	TicketLifetime time.Duration `yaml:"ticket_lifetime"`
	// AllowInsecure lets MinVersion and Suites name weak choices; each one is reported
	// by Check so the hub warns at start.
	AllowInsecure bool `yaml:"allow_insecure"`
}

// DefaultGroups are Go's groups without P-521: X25519MLKEM768 (post-quantum), X25519,
// P-256, P-384. P-521 costs a server far more than the others (Go: 307 key agreements a
// second against 13,600 for X25519 and 1,400 for P-384, docs/frontdoor.md), so a client
// that picks it is a cheap way to load the hub; no common client needs it, and Mozilla's
// "intermediate" profile (what sslyze checks) leaves it out. An operator may list it.
var DefaultGroups = []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256, tls.CurveP384}

// Check validates p; field names errors with prefix (e.g. "frontdoor.tls"). It returns
// the insecure choices AllowInsecure let through, for the hub to warn about.
func (p Policy) Check(prefix string) (insecure []string, err error) {
	_, insecure, err = p.resolve(prefix)
	return insecure, err
}

// Apply sets c's versions, suites, groups and session tickets from p, which must have
// passed Check.
func (p Policy) Apply(c *tls.Config) error {
	r, _, err := p.resolve("tls")
	if err != nil {
		return err
	}
	c.MinVersion, c.MaxVersion = r.min, r.max
	c.CipherSuites = r.suites
	c.CurvePreferences = r.groups
	c.SessionTicketsDisabled = !r.tickets
	if r.tickets {
		newTicketKeys(r.ticketLifetime, time.Now).install(c)
	}
	return nil
}

// Config is a new server config with p applied.
func (p Policy) Config() (*tls.Config, error) {
	c := &tls.Config{}
	return c, p.Apply(c)
}

type resolved struct {
	min, max uint16
	suites   []uint16
	groups   []tls.CurveID
	tickets  bool

	ticketLifetime time.Duration
}

func (p Policy) resolve(prefix string) (r resolved, insecure []string, err error) {
	r.min, r.max, r.tickets = tls.VersionTLS12, tls.VersionTLS13, p.SessionTickets == nil || *p.SessionTickets
	switch r.ticketLifetime = p.TicketLifetime; {
	case r.ticketLifetime == 0:
		r.ticketLifetime = DefaultTicketLifetime
	case r.ticketLifetime < time.Minute:
		return r, nil, fmt.Errorf("%s.ticket_lifetime: %s is under a minute (write a unit: 12h, 30m)", prefix, r.ticketLifetime)
	case r.ticketLifetime > maxTicketLifetime:
		return r, nil, fmt.Errorf("%s.ticket_lifetime: %s is over 7 days (168h), the longest a client may resume a session", prefix, r.ticketLifetime)
	}
	for _, f := range []struct {
		name, value string
		to          *uint16
	}{{"min_version", p.MinVersion, &r.min}, {"max_version", p.MaxVersion, &r.max}} {
		if f.value == "" {
			continue
		}
		v, weak, ok := parseVersion(f.value)
		if !ok {
			return r, nil, fmt.Errorf("%s.%s: %q is not a TLS version (1.2 or 1.3; 1.0 and 1.1 with allow_insecure)", prefix, f.name, f.value)
		}
		if weak && f.name == "min_version" {
			if !p.AllowInsecure {
				return r, nil, fmt.Errorf("%s.min_version: TLS %s is insecure; set %s.allow_insecure to accept it", prefix, f.value, prefix)
			}
			insecure = append(insecure, "TLS "+strings.TrimSpace(f.value))
		}
		*f.to = v
	}
	if r.min > r.max {
		return r, nil, fmt.Errorf("%s: min_version is above max_version", prefix)
	}
	if len(p.Suites) == 0 {
		for _, s := range tls.CipherSuites() {
			if secureSuite(s) {
				r.suites = append(r.suites, s.ID)
			}
		}
	}
	seen := map[uint16]bool{}
	for _, name := range p.Suites {
		s, ok := suiteByName(name)
		if !ok {
			return r, nil, fmt.Errorf("%s.suites: %q: %s", prefix, name, why(name))
		}
		if seen[s.ID] {
			return r, nil, fmt.Errorf("%s.suites: %s listed twice", prefix, s.Name)
		}
		seen[s.ID] = true
		if !secureSuite(s) {
			if !p.AllowInsecure {
				return r, nil, fmt.Errorf("%s.suites: %s is insecure (no forward secrecy or no AEAD cipher); set %s.allow_insecure to offer it", prefix, s.Name, prefix)
			}
			insecure = append(insecure, s.Name)
		}
		r.suites = append(r.suites, s.ID)
	}
	if r.max < tls.VersionTLS13 && len(r.suites) == 0 {
		return r, nil, fmt.Errorf("%s: no suite left for TLS 1.2", prefix)
	}
	dup := map[tls.CurveID]bool{}
	for _, name := range p.Groups {
		g, ok := groups[strings.ToUpper(strings.TrimSpace(name))]
		if !ok {
			return r, nil, fmt.Errorf("%s.groups: %q is not a group Go offers (X25519MLKEM768, X25519, P-256, P-384, P-521)", prefix, name)
		}
		if dup[g] {
			return r, nil, fmt.Errorf("%s.groups: %s listed twice", prefix, g)
		}
		dup[g] = true
		r.groups = append(r.groups, g)
	}
	if len(p.Groups) == 0 {
		r.groups = slices.Clone(DefaultGroups)
	}
	if len(r.groups) == 1 && r.groups[0] == tls.X25519MLKEM768 && r.min < tls.VersionTLS13 {
		return r, nil, fmt.Errorf("%s.groups: X25519MLKEM768 works only with TLS 1.3; add a classical group for TLS 1.2 clients, or set min_version: \"1.3\"", prefix)
	}
	return r, insecure, nil
}
