package mqttbridge

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/mqtttopic"
	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// Config is hub.yaml's mqtt.bridge section.
type Config struct {
	// Address is the central broker, host:port.
	Address string `yaml:"address"`
	// CA is a PEM file of the CA that signed the central broker's certificate: the only
	// one the bridge trusts for it (the system's roots are not used).
	CA string `yaml:"ca"`
	// ServerName is the name the central broker's certificate must carry; default the
	// address's host.
	ServerName string           `yaml:"server_name"`
	TLS        tlspolicy.Policy `yaml:"tls"`
	// Cert and Key are the bridge's client certificate, if the centre asks for one.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// Username and PasswordFile log in with a password (kept in its own file, 0600, so
	// hub.yaml holds no secret).
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	// ClientID is the bridge's client identifier at the centre; default iotsafe-bridge-HOST.
	ClientID string `yaml:"client_id"`
	// Protocol is "5" (the default) or "3.1.1".
	Protocol string `yaml:"protocol"`
	// Keepalive is the MQTT keep-alive; default 60s.
	Keepalive time.Duration `yaml:"keepalive"`
	// Topics are the rules: what goes out, what comes in.
	Topics []Rule `yaml:"topics"`
	// Queue bounds the disk queue of outgoing messages waiting for the centre.
	Queue QueueConfig `yaml:"queue"`
	// InsecurePlain connects without TLS: only for a central broker on the same machine;
	// the hub warns at start.
	InsecurePlain bool `yaml:"insecure_plain"`
}

// Rule is one topic rule, as a Mosquitto bridge's `topic` line: the local topic is
// Local+Pattern, the remote one Remote+Pattern.
type Rule struct {
	Pattern string `yaml:"pattern"`
	// Direction: out (site to centre, the default), in (centre to site) or both.
	Direction string `yaml:"direction"`
	// QoS is the highest QoS the message is carried with (a message keeps a lower one);
	// default 1. Out at most 1: the bridge delivers out at least once.
	QoS    *int   `yaml:"qos"`
	Local  string `yaml:"local"`
	Remote string `yaml:"remote"`
}

// QueueConfig bounds the outgoing queue.
type QueueConfig struct {
	// MaxMessages and MaxBytes bound what waits; defaults 1,000,000 and 256 MiB.
	MaxMessages int           `yaml:"max_messages"`
	MaxBytes    bytesize.Size `yaml:"max_bytes"`
	// Overflow is what a full queue does: "refuse" (the default: the site broker does not
	// acknowledge the message, so the device keeps it and sends it again; nothing
	// acknowledged is ever lost) or "drop_oldest" (the oldest waiting message is dropped
	// and counted, for fleets that prefer fresh data to complete data).
	Overflow string `yaml:"overflow"`
}

// Overflow policies.
const (
	OverflowRefuse     = "refuse"
	OverflowDropOldest = "drop_oldest"
)

// Directions.
const (
	Out  = "out"
	In   = "in"
	Both = "both"
)

// ApplyDefaults fills zero values.
func (c *Config) ApplyDefaults(hostname string) {
	if c.Protocol == "" {
		c.Protocol = "5"
	}
	if c.Keepalive == 0 {
		c.Keepalive = 60 * time.Second
	}
	if c.ClientID == "" {
		c.ClientID = "iotsafe-bridge-" + hostname
	}
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(c.Address)
	}
	for i := range c.Topics {
		r := &c.Topics[i]
		if r.Direction == "" {
			r.Direction = Out
		}
		if r.QoS == nil {
			one := 1
			r.QoS = &one
		}
	}
	if c.Queue.MaxMessages == 0 {
		c.Queue.MaxMessages = 1_000_000
	}
	if c.Queue.MaxBytes == 0 {
		c.Queue.MaxBytes = 256 << 20
	}
	if c.Queue.Overflow == "" {
		c.Queue.Overflow = OverflowRefuse
	}
}

// version is the MQTT protocol level the bridge speaks.
func (c Config) version() byte {
	if c.Protocol == "3.1.1" {
		return 4
	}
	return 5
}

// Validate checks a config after ApplyDefaults. It returns the insecure choices the
// operator made explicitly, for the hub to warn about, each as "SECTION: what".
func (c Config) Validate() (insecure []string, err error) {
	const p = "mqtt.bridge"
	if err := hostport.Dial(c.Address); err != nil {
		return nil, fmt.Errorf("%s.address: %v", p, err)
	}
	switch c.Protocol {
	case "5", "3.1.1":
	default:
		return nil, fmt.Errorf("%s.protocol: %q: use 5 or 3.1.1", p, c.Protocol)
	}
	if c.InsecurePlain {
		if c.CA != "" || c.Cert != "" {
			return nil, fmt.Errorf("%s: insecure_plain has no TLS: drop ca and cert, or insecure_plain", p)
		}
		insecure = append(insecure, p+".insecure_plain: no TLS to the central broker")
	} else {
		if c.CA == "" {
			return nil, fmt.Errorf("%s.ca: the central broker's CA (PEM) is needed: the bridge trusts that CA only", p)
		}
		weak, err := c.TLS.Check(p + ".tls")
		if err != nil {
			return nil, err
		}
		for _, w := range weak {
			insecure = append(insecure, p+".tls: "+w)
		}
	}
	if (c.Cert == "") != (c.Key == "") {
		return nil, fmt.Errorf("%s: give both cert and key, or neither", p)
	}
	if c.PasswordFile != "" && c.Username == "" {
		return nil, fmt.Errorf("%s.password_file needs a username", p)
	}
	if c.ClientID == "" || len(c.ClientID) > 65535 {
		return nil, fmt.Errorf("%s.client_id: empty or too long", p)
	}
	if c.Keepalive < time.Second || c.Keepalive > 65535*time.Second {
		return nil, fmt.Errorf("%s.keepalive: %v: use 1s to 18h", p, c.Keepalive)
	}
	if len(c.Topics) == 0 {
		return nil, fmt.Errorf("%s.topics: no rule: say what goes out and what comes in", p)
	}
	for i, r := range c.Topics {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("%s.topics[%d]: %v", p, i, err)
		}
	}
	if c.version() != 5 {
		// MQTT 3.1.1 has no no-local subscription: a remote topic the bridge both sends
		// and subscribes to would come back to it.
		for i, out := range c.Topics {
			for j, in := range c.Topics {
				if out.sends() && in.receives() && mqtttopic.Overlap(out.Remote+out.Pattern, in.Remote+in.Pattern) {
					return nil, fmt.Errorf("%s.topics[%d] sends to remote topics that topics[%d] receives: with MQTT 3.1.1 they would loop (use protocol 5, or remote prefixes apart)", p, i, j)
				}
			}
		}
	}
	switch c.Queue.Overflow {
	case OverflowRefuse, OverflowDropOldest:
	default:
		return nil, fmt.Errorf("%s.queue.overflow: %q: use refuse or drop_oldest", p, c.Queue.Overflow)
	}
	if c.Queue.MaxMessages < 0 || c.Queue.MaxBytes < 0 {
		return nil, fmt.Errorf("%s.queue: limits must not be negative", p)
	}
	return insecure, nil
}

func (r Rule) sends() bool    { return r.Direction == Out || r.Direction == Both }
func (r Rule) receives() bool { return r.Direction == In || r.Direction == Both }

func (r Rule) validate() error {
	switch r.Direction {
	case Out, In, Both:
	default:
		return fmt.Errorf("direction %q: use out, in or both", r.Direction)
	}
	if *r.QoS < 0 || *r.QoS > 2 {
		return fmt.Errorf("qos %d: use 0, 1 or 2", *r.QoS)
	}
	if *r.QoS == 2 && r.sends() {
		// Exactly once across a lost connection would need the centre's packet ids kept
		// on disk with every send; the bridge delivers at least once, and says so.
		return fmt.Errorf("qos 2 is for direction in only: the bridge sends out at QoS 0 or 1 (at least once; its disk queue keeps every message until the centre acknowledges it)")
	}
	for _, pf := range []struct{ name, v string }{{"local", r.Local}, {"remote", r.Remote}} {
		if strings.ContainsAny(pf.v, "+#\x00") {
			return fmt.Errorf("%s prefix %q: no wildcards", pf.name, pf.v)
		}
	}
	if r.Pattern == "" && (r.Local == "" || r.Remote == "") {
		return errors.New("an empty pattern needs both prefixes (it maps one topic to one topic)")
	}
	for _, f := range []string{r.Local + r.Pattern, r.Remote + r.Pattern} {
		if err := mqtttopic.ValidFilter(f); err != nil {
			return fmt.Errorf("%q: %v", f, err)
		}
	}
	return nil
}

// route maps a topic by the rules of one direction: the first rule whose source filter
// matches gives the destination topic and the QoS cap. ok is false if none does.
func route(rules []Rule, dir string, topic string) (to string, qos byte, ok bool) {
	for _, r := range rules {
		var from, dst string
		switch {
		case dir == Out && r.sends():
			from, dst = r.Local, r.Remote
		case dir == In && r.receives():
			from, dst = r.Remote, r.Local
		default:
			continue
		}
		if !strings.HasPrefix(topic, from) || !mqtttopic.Match(from+r.Pattern, topic) {
			continue
		}
		return dst + strings.TrimPrefix(topic, from), byte(*r.QoS), true
	}
	return "", 0, false
}
