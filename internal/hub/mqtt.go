package hub

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/pki"
)

// startMQTT starts the broker when a listener is configured; after the front door, whose
// certificate the TLS listener uses unless mqtt.cert is set.
func (h *Hub) startMQTT(context.Context) error {
	cfg := h.cfg.MQTT
	if !cfg.Enabled() {
		return nil
	}
	log := h.log.With("component", "mqtt")
	b := mqttbroker.New(cfg, h.dir, h.devices, h.store, h.guard, log)
	b.Violation = h.ssh.Violation // one count per device, whichever path it broke
	if h.accounts != nil {
		b.Platform = platform{h}
	}
	var tc *tls.Config
	if cfg.TLSListen != "" {
		c, err := cfg.TLS.Config()
		if err != nil {
			return fmt.Errorf("hub: mqtt: %w", err)
		}
		switch {
		case cfg.Cert != "":
			if c.GetCertificate, err = pki.FileCertificate(cfg.Cert, cfg.Key, log); err != nil {
				return fmt.Errorf("hub: mqtt: %w", err)
			}
		case h.front != nil:
			c.GetCertificate = h.front.GetCertificate
		default:
			return fmt.Errorf("hub: mqtt.tls_listen needs mqtt.cert and mqtt.key, or the front door")
		}
		c.NextProtos = []string{"mqtt"}
		if h.front != nil && h.front.CA() != nil {
			// Devices may log in with a certificate the hub's CA issued
			// (iotsafe device cert) instead of a secret.
			c.ClientCAs, c.ClientAuth = h.front.CA().Pool(), tls.VerifyClientCertIfGiven
		}
		tc = c
	}
	if err := b.Start(tc); err != nil {
		b.Close()
		return fmt.Errorf("hub: %w", err)
	}
	if h.metrics != nil {
		if err := h.metrics.Register(b.Collectors()...); err != nil {
			b.Close()
			return fmt.Errorf("hub: %w", err)
		}
	}
	h.mqtt.Store(b)
	if b.Session() != nil {
		h.services.Add(b.Session())
	}
	for _, id := range []string{mqttbroker.PlainListener, mqttbroker.TLSListener} {
		if a := b.Addr(id); a != nil {
			log.Info("MQTT broker", "listener", id, "listen", a.String())
		}
	}
	return nil
}

// MQTTAddr is where the broker's listener (mqttbroker.PlainListener or TLSListener)
// listens; nil when it is off.
func (h *Hub) MQTTAddr(id string) net.Addr {
	b := h.mqtt.Load()
	if b == nil {
		return nil
	}
	return b.Addr(id)
}

// platform lets platform apps log in to the broker as front-door accounts, under the
// same failed-login limits as the front door and the hub's current grants.
type platform struct{ h *Hub }

func (p platform) CheckPassword(ctx context.Context, ip, name, password string) (int64, string, string, error) {
	a, err := p.h.accounts.Password(ctx, ip, name, password)
	return a.ID, a.Name, a.Stamp, err
}

func (p platform) AllowedAccount(id int64, device, right string) bool {
	return p.h.access.Policy().AllowedAccount(id, device, right)
}

func (p platform) AccountStamp(id int64) (string, bool) { return p.h.accounts.Stamp(id) }
