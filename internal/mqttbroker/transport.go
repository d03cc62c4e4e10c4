package mqttbroker

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/iotsafe/iotsafe/internal/pki"
	"github.com/iotsafe/iotsafe/internal/transport"
)

// Open starts the broker as a device transport: its listeners bound, its plain
// listener's in-process twin in d.Sessions, its metrics registered. The TLS listener
// uses mqtt.cert and mqtt.key, else the front door's certificate; with the hub's local
// CA, devices may log in with a certificate it issued (iotsafe device cert).
func Open(cfg Config, d transport.Deps) (transport.Transport, error) {
	b := New(cfg, d.DataDir, d.Devices, d.Store, d.Audit, d.Log)
	b.Violation = d.Violation
	b.Platform = d.Accounts
	b.services, b.domain = d.Sessions, d.Domain
	tc, err := listenerTLS(cfg, d)
	if err != nil {
		return nil, err
	}
	if err := b.Start(tc); err != nil {
		b.Close()
		return nil, err // Start's errors name mqtt
	}
	if d.Metrics != nil {
		if err := d.Metrics.Register(b.Collectors()...); err != nil {
			b.Close()
			return nil, fmt.Errorf("mqtt: metrics: %w", err)
		}
	}
	if b.session != nil && b.services != nil {
		b.services.Add(b.session) // Close removes it
	}
	for _, l := range b.Listeners() {
		d.Log.Info("MQTT broker", "listener", listenerID(l.Role), "listen", l.Addr.String())
	}
	return b, nil
}

// listenerTLS is the TLS listener's configuration (policy from mqtt.tls), nil without
// one.
func listenerTLS(cfg Config, d transport.Deps) (*tls.Config, error) {
	if cfg.TLSListen == "" {
		return nil, nil
	}
	c, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("mqtt: %w", err)
	}
	switch {
	case cfg.Cert != "":
		if c.GetCertificate, err = pki.FileCertificate(cfg.Cert, cfg.Key, d.Log); err != nil {
			return nil, fmt.Errorf("mqtt: %w", err)
		}
	case d.FrontdoorTLS != nil:
		c.GetCertificate = d.FrontdoorTLS.GetCertificate
	default:
		return nil, errors.New("mqtt.tls_listen needs mqtt.cert and mqtt.key, or the front door")
	}
	c.NextProtos = []string{"mqtt"}
	if d.FrontdoorTLS != nil && d.FrontdoorTLS.ClientCAs != nil {
		c.ClientCAs, c.ClientAuth = d.FrontdoorTLS.ClientCAs, tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// Listeners are the broker's plain and TLS listeners, those that are on.
func (b *Broker) Listeners() []transport.Listener {
	var out []transport.Listener
	if a := b.addrs[PlainListener]; a != nil {
		out = append(out, transport.Listener{Role: "mqtt", Addr: a, Proto: "mqtt", Says: "MQTT for devices on %s (give devices a direct alias to it)"})
	}
	if a := b.addrs[TLSListener]; a != nil {
		name := ""
		if b.domain != "" {
			name = "mqtt." + b.domain
		}
		out = append(out, transport.Listener{Role: "mqtt_tls", Addr: a, Proto: "mqtts", ServerName: name,
			Says: "MQTT over TLS on %s (devices log in with their name and telemetry secret)"})
	}
	return out
}

// listenerID is the broker's own name of a listener role (the log's "listener").
func listenerID(role string) string {
	if role == "mqtt_tls" {
		return TLSListener
	}
	return PlainListener
}

// DevicesChanged disconnects the clients of devices revoked, removed or enrolled again.
func (b *Broker) DevicesChanged() { b.Revalidate() }
