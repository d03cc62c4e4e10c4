package mqttbroker

import (
	"context"
	"strings"

	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Via marks the notifications the broker stores: the store's fan-out hands every commit
// back to the broker, which has already delivered (and bridged) its own messages.
const Via = "mqtt"

// joinFanout subscribes the broker to the store's commits and, with a bridge, installs
// the bridge's queue as the store's durable hook: every notification stored another
// way (REST, SOAP, a gateway's relay, another hub of a shared store) reaches the
// broker's subscribers, and what an out rule matches is in the bridge's queue before
// its device is answered.
func (b *Broker) joinFanout() {
	ctx, cancel := context.WithCancel(context.Background())
	b.unsubscribe = cancel
	b.subscribed = b.store.Subscribe(ctx, b.publishNotifications)
	if b.bridge != nil {
		b.store.SetDurableHook(b.forwardNotifications)
	}
}

// leaveFanout undoes joinFanout before the bridge and the server close.
func (b *Broker) leaveFanout() {
	if b.unsubscribe == nil {
		return
	}
	if b.bridge != nil {
		b.store.SetDurableHook(nil)
	}
	b.unsubscribe()
	b.subscribed()
}

// publishNotifications delivers notifications that arrived another way to the broker's
// subscribers, as a device's MQTT message would be: on devices/DEVICE/notifications/NAME
// with the parameters as the payload, at QoS 0, not retained. Subscribers' grants are
// checked on delivery as for any message; nothing is stored again. A name no topic can
// carry (+, #, NUL) is only stored.
func (b *Broker) publishNotifications(ns []telemetry.Notification) {
	for _, n := range ns {
		if n.Via == Via {
			continue
		}
		topic, ok := notificationTopic(n)
		if !ok {
			continue
		}
		if err := b.srv.Publish(topic, n.Parameters, false, 0); err != nil {
			b.log.Debug("publishing a notification to MQTT subscribers failed", "topic", topic, "err", err)
		}
	}
}

// forwardNotifications is the store's durable hook with a bridge: each notification
// that arrived another way and that an out rule matches is put in the bridge's queue on
// publishNotifications' topic, at QoS 1 as far as the rule allows. When it returns nil,
// those are on disk in the queue; the broker's own messages it bridged itself (hook.go).
func (b *Broker) forwardNotifications(ctx context.Context, ns []telemetry.Notification) error {
	for _, n := range ns {
		topic, ok := notificationTopic(n)
		if n.Via == Via || !ok || !b.bridge.Sends(topic) {
			continue
		}
		if err := b.bridge.Forward(ctx, topic, n.Parameters, 1, false); err != nil {
			b.notBridged(err, "the bridge's queue did not take a notification; its device is told to send it again", "device", n.Device, "topic", topic)
			return err
		}
	}
	return nil
}

// notificationTopic is where a notification stored another way is published, if a
// topic can carry its device and name.
func notificationTopic(n telemetry.Notification) (string, bool) {
	if n.Name == "" || strings.ContainsAny(n.Name, "+#\x00") || strings.ContainsAny(n.Device, "/+#\x00") {
		return "", false
	}
	return "devices/" + n.Device + "/notifications/" + n.Name, true
}
