package hub

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/pki"
)

// Ready is what `iotsafe hub --ready-file FILE` writes once every listener is up: what a
// supervisor, a script or the lab needs to reach the hub, without parsing its output.
type Ready struct {
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Data    string    `json:"data"`
	SSH     string    `json:"ssh"`
	// HostKeys are the hub's public host keys, for agents' --hub-key and known_hosts.
	HostKeys []ReadyHostKey `json:"host_keys"`
	// NextHostKeys are keys the hub announces to devices during a rotation (iotsafe
	// hostkey add), as they were at start: pin them beside HostKeys on new devices.
	NextHostKeys []ReadyHostKey `json:"next_host_keys,omitempty"`
	// Frontdoor, FrontdoorDomain and FrontdoorCA (the local CA's certificate file, when
	// the hub issues its own) are set when the front door is on.
	Frontdoor       string `json:"frontdoor,omitempty"`
	FrontdoorDomain string `json:"frontdoor_domain,omitempty"`
	FrontdoorCA     string `json:"frontdoor_ca,omitempty"`
	REST            string `json:"rest,omitempty"`     // the plain REST listener, host:port
	MQTT            string `json:"mqtt,omitempty"`     // the broker's plain listener
	MQTTTLS         string `json:"mqtt_tls,omitempty"` // the broker's TLS listener
	Metrics         string `json:"metrics,omitempty"`  // host:port of /metrics
	// Listeners are all of the above and every device transport's, by role.
	Listeners map[string]string `json:"listeners,omitempty"`
}

// ReadyHostKey is one host key.
type ReadyHostKey struct {
	Type        string `json:"type"`
	Fingerprint string `json:"fingerprint"` // SHA256:...
	PublicKey   string `json:"public_key"`  // authorized_keys format
}

func readyKeys(keys []ssh.PublicKey) []ReadyHostKey {
	var out []ReadyHostKey
	for _, k := range keys {
		out = append(out, ReadyHostKey{Type: k.Type(), Fingerprint: ssh.FingerprintSHA256(k),
			PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))})
	}
	return out
}

// Ready describes the running hub.
func (h *Hub) Ready() Ready {
	r := Ready{PID: os.Getpid(), Version: h.version, Started: h.upSince}
	if abs, err := filepath.Abs(h.dir); err == nil {
		r.Data = abs
	}
	r.HostKeys = readyKeys(h.HostKeys())
	r.NextHostKeys = readyKeys(h.NextHostKeys())
	at := map[string]*string{"ssh": &r.SSH, "frontdoor": &r.Frontdoor, "rest": &r.REST, "metrics": &r.Metrics, "mqtt": &r.MQTT, "mqtt_tls": &r.MQTTTLS}
	r.Listeners = map[string]string{}
	for role, a := range h.listeners() {
		r.Listeners[role] = a.String()
		if field := at[role]; field != nil { // the fields of the first transports, kept for readers of those
			*field = a.String()
		}
	}
	if r.Frontdoor != "" {
		r.FrontdoorDomain = h.cfg.Frontdoor.Domain
		if h.cfg.Frontdoor.Cert == "" {
			r.FrontdoorCA = filepath.Join(r.Data, pki.CADir, pki.CACertFile)
		}
	}
	return r
}

// WriteReadyFile writes r to path at once (a reader never sees half of it).
func WriteReadyFile(path string, r Ready) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// ReadReadyFile reads what WriteReadyFile wrote.
func ReadReadyFile(path string) (Ready, error) {
	var r Ready
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("ready file %s: %w", path, err)
	}
	return r, nil
}
