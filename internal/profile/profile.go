package profile

import (
	"errors"
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"

	yaml "go.yaml.in/yaml/v3"

	"github.com/iotsafe/iotsafe/internal/strictyaml"
)

// DefaultName is the profile every device gets unless the operator names another.
const DefaultName = "default"

// Violation actions.
const (
	ActionLog    = "log"
	ActionRevoke = "revoke"
)

// ErrInvalid is wrapped by every validation error so callers can branch on it.
var ErrInvalid = errors.New("profile: invalid")

// Profile is the paper's IoTProfile: what one device may expose and reach, and its limits.
// The hub validates every request against it; a device cannot override it.
type Profile struct {
	// Name identifies the profile in the registry.
	Name string `yaml:"name" json:"name"`
	// Reverse maps each alias the device may expose (ssh -R ALIAS:PORT:...) to the
	// device-side port it is expected to announce; 0 accepts any port.
	Reverse map[string]int `yaml:"reverse" json:"reverse"`
	// Direct maps each alias the device may reach on the hub side (ssh -L ...:ALIAS:PORT)
	// to the host:port the hub connects to on its behalf. The requested port is not used:
	// the alias alone decides the target.
	Direct map[string]string `yaml:"direct" json:"direct"`
	// MaxSessions bounds concurrent SSH sessions of the device; 0 means 1.
	MaxSessions int `yaml:"max_sessions" json:"max_sessions"`
	// MaxForwards bounds concurrently registered reverse forwards; 0 means the number
	// of reverse aliases (at least 1).
	MaxForwards int `yaml:"max_forwards" json:"max_forwards"`
	// MaxChannels bounds concurrently open channels (both directions) per session; 0 means 64.
	MaxChannels int `yaml:"max_channels" json:"max_channels"`
	// Compression allows in-session compression negotiated by iotsafe agents (off by default).
	Compression bool `yaml:"compression" json:"compression"`
	// OnViolation says what happens once a device has broken the profile often enough.
	OnViolation ViolationPolicy `yaml:"on_violation" json:"on_violation"`
	// Gateway, if set, makes the device a gateway: a hub that relays the devices
	// connected to it over its one session (paper 000, three-level scheme).
	Gateway *GatewayPolicy `yaml:"gateway,omitempty" json:"gateway,omitempty"`
}

// GatewayPolicy bounds what a gateway may announce. Each device it announces becomes a
// device of the centre's registry (created at its first announcement, bound to that
// gateway) with DeviceProfile, whose reverse aliases are the aliases it may serve.
type GatewayPolicy struct {
	// MaxDevices bounds the devices announced at once; 0 means 1000.
	MaxDevices int `yaml:"max_devices" json:"max_devices"`
	// DeviceProfile is the profile of the devices behind the gateway; "" means default.
	DeviceProfile string `yaml:"device_profile" json:"device_profile"`
	// Devices are the names the gateway may announce, as shell patterns ("site1-*");
	// empty means any name.
	Devices []string `yaml:"devices" json:"devices"`
}

// DefaultGatewayDevices is GatewayPolicy.MaxDevices's default.
const DefaultGatewayDevices = 1000

// Allows reports whether the gateway may announce a device of that name.
func (g *GatewayPolicy) Allows(device string) bool {
	if len(g.Devices) == 0 {
		return true
	}
	for _, pat := range g.Devices {
		if ok, _ := path.Match(pat, device); ok {
			return true
		}
	}
	return false
}

// ViolationPolicy is the per-profile reaction to violations.
type ViolationPolicy struct {
	// Action is "log" (the default: record and refuse) or "revoke" (also revoke the key).
	Action string `yaml:"action" json:"action"`
	// After is how many violations trigger Action; 0 means 5.
	After int `yaml:"after" json:"after"`
}

// Default returns the built-in profile: one reverse alias "http", no direct alias.
func Default() *Profile {
	p := &Profile{Name: DefaultName, Reverse: map[string]int{"http": 80}}
	p.ApplyDefaults()
	return p
}

// ApplyDefaults fills zero values with the documented defaults.
func (p *Profile) ApplyDefaults() {
	if p.Reverse == nil {
		p.Reverse = map[string]int{}
	}
	if p.Direct == nil {
		p.Direct = map[string]string{}
	}
	if p.MaxSessions == 0 {
		p.MaxSessions = 1
	}
	if p.MaxForwards == 0 {
		p.MaxForwards = max(1, len(p.Reverse))
	}
	if p.MaxChannels == 0 {
		p.MaxChannels = 64
	}
	if p.OnViolation.Action == "" {
		p.OnViolation.Action = ActionLog
	}
	if p.OnViolation.After == 0 {
		p.OnViolation.After = 5
	}
	if g := p.Gateway; g != nil {
		if g.MaxDevices == 0 {
			g.MaxDevices = DefaultGatewayDevices
		}
		if g.DeviceProfile == "" {
			g.DeviceProfile = DefaultName
		}
	}
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidName reports whether s may name a device, alias or profile. Names become DNS
// labels for the front door, so the rules are those of a lower-case hostname label.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Bounds of one profile, checked before anything is allocated: the lab's largest
// gateway session holds 10,000 forwards.
const (
	MaxAliases        = 16384
	MaxSize           = 1 << 20
	MaxGatewayDevices = 1_000_000
)

// Validate checks every field and names the offending one in the error.
func (p *Profile) Validate() error {
	if !ValidName(p.Name) {
		return fmt.Errorf("%w: name %q: use lower-case letters, digits and '-' (max 63)", ErrInvalid, p.Name)
	}
	if n := len(p.Reverse) + len(p.Direct); n > MaxAliases {
		return fmt.Errorf("%w: %d aliases: at most %d per profile (a gateway's devices each get a profile of their own)", ErrInvalid, n, MaxAliases)
	}
	for alias, port := range p.Reverse {
		if !ValidName(alias) {
			return fmt.Errorf("%w: reverse.%s: alias must be lower-case letters, digits and '-'", ErrInvalid, alias)
		}
		if port < 0 || port > 65535 {
			return fmt.Errorf("%w: reverse.%s: port %d out of range 0-65535", ErrInvalid, alias, port)
		}
	}
	for alias, target := range p.Direct {
		if !ValidName(alias) {
			return fmt.Errorf("%w: direct.%s: alias must be lower-case letters, digits and '-'", ErrInvalid, alias)
		}
		if err := validHostPort(target); err != nil {
			return fmt.Errorf("%w: direct.%s: %v", ErrInvalid, alias, err)
		}
	}
	for field, v := range map[string]int{"max_sessions": p.MaxSessions, "max_forwards": p.MaxForwards,
		"max_channels": p.MaxChannels, "on_violation.after": p.OnViolation.After} {
		if v < 0 || v > 1_000_000 {
			return fmt.Errorf("%w: %s: %d out of range 0-1000000", ErrInvalid, field, v)
		}
	}
	if a := p.OnViolation.Action; a != "" && a != ActionLog && a != ActionRevoke {
		return fmt.Errorf("%w: on_violation.action: %q is not one of log, revoke", ErrInvalid, a)
	}
	if g := p.Gateway; g != nil {
		if g.MaxDevices < 0 || g.MaxDevices > MaxGatewayDevices {
			return fmt.Errorf("%w: gateway.max_devices: %d out of range 0-%d", ErrInvalid, g.MaxDevices, MaxGatewayDevices)
		}
		if g.DeviceProfile != "" && !ValidName(g.DeviceProfile) {
			return fmt.Errorf("%w: gateway.device_profile %q: not a profile name", ErrInvalid, g.DeviceProfile)
		}
		if g.DeviceProfile == p.Name {
			return fmt.Errorf("%w: gateway.device_profile: the devices behind a gateway cannot have the gateway's own profile", ErrInvalid)
		}
		for _, pat := range g.Devices {
			if _, err := path.Match(pat, ""); err != nil || pat == "" {
				return fmt.Errorf("%w: gateway.devices: %q is not a name pattern (shell-style, e.g. site1-*)", ErrInvalid, pat)
			}
		}
	}
	return nil
}

func validHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("target %q: want host:port", s)
	}
	if host == "" {
		return fmt.Errorf("target %q: empty host", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("target %q: port must be 1-65535", s)
	}
	return nil
}

// Parse reads a profile from YAML (JSON is YAML too). Unknown fields are errors, so a
// typo never silently weakens a limit. The result has defaults applied and is valid.
func Parse(data []byte) (*Profile, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes: a profile is at most %d", ErrInvalid, len(data), MaxSize)
	}
	var p Profile
	if err := strictyaml.Decode(data, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.ApplyDefaults()
	return &p, nil
}

// Marshal returns the canonical YAML of p, as stored in the registry.
func (p *Profile) Marshal() []byte {
	b, _ := yaml.Marshal(p) // a Profile always marshals
	return b
}

// ReverseAliases returns the reverse aliases in a stable order.
func (p *Profile) ReverseAliases() []string {
	out := make([]string, 0, len(p.Reverse))
	for a := range p.Reverse {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
