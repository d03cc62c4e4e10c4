package hub

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/pki"
	"github.com/iotsafe/iotsafe/internal/registry"
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
	h.forgetMissedMQTTRemovals(context.Background(), b)
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

// mqttRemovalsMark is the data folder's record of the last registry change the broker's
// session store has seen applied: devices removed after it (while this hub did not run)
// still have sessions and retained messages there.
const mqttRemovalsMark = "mqtt-removals.mark"

// forgetMissedMQTTRemovals drops, at start, what the restored session store keeps of
// devices removed while the hub was down: a device enrolled again under a removed name
// must not inherit the old one's persistent session or retained messages.
func (h *Hub) forgetMissedMQTTRemovals(ctx context.Context, b *mqttbroker.Broker) {
	if !h.cfg.MQTT.Persists() {
		return
	}
	path := filepath.Join(h.dir, mqttRemovalsMark)
	raw, err := os.ReadFile(path)
	after, perr := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err == nil && perr == nil {
		var names []string
		for {
			evs, err := h.reg.EventsAfter(ctx, registry.EventDeviceRemoved, after, 1000)
			if err != nil {
				h.log.Error("reading device removals for the MQTT session store failed; removed devices' sessions may stay until they are removed again", "err", err)
				return
			}
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				names = append(names, e.Device)
			}
			after = evs[len(evs)-1].ID
		}
		if len(names) > 0 {
			b.ForgetDevices(names)
			h.log.Info("dropped the MQTT sessions and retained messages of devices removed while the hub was down", "component", "mqtt", "devices", len(names))
		}
	}
	h.markMQTTRemovals(ctx)
}

// markMQTTRemovals records that every change up to now is applied to the broker's
// session store (at start, and after each reload: a running broker drops removed
// devices' sessions itself).
func (h *Hub) markMQTTRemovals(ctx context.Context) {
	if !h.cfg.MQTT.Persists() || h.mqtt.Load() == nil {
		return
	}
	id, err := h.reg.LastChangeID(ctx)
	if err == nil {
		err = atomicfile.Write(filepath.Join(h.dir, mqttRemovalsMark), []byte(strconv.FormatInt(id, 10)+"\n"), atomicfile.Options{})
	}
	if err != nil {
		h.log.Warn("recording the MQTT session store's removals mark failed", "err", err)
	}
}
