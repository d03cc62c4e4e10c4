package hub

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/registry"
)

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
