package mqttbroker

import (
	"context"
	"errors"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/iotsafe/iotsafe/internal/mqtttopic"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// hook connects mochi to the hub: who a client is, what it may touch, what is stored.
type hook struct {
	mqtt.HookBase
	b *Broker
}

func (h *hook) ID() string { return "iotsafe" }

func (h *hook) Provides(b byte) bool {
	// A switch: mochi asks every hook about every event of every packet.
	switch b {
	case mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnDisconnect, mqtt.OnPublish:
		return true
	}
	return false
}

func (h *hook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	id, why, breach := h.b.authenticate(cl, pk)
	if why != "" {
		if breach {
			h.b.counts.topicRefused.Add(1)
		} else {
			h.b.counts.authRefused.Add(1)
		}
		if breach && h.b.Violation != nil {
			h.b.Violation(id.device, "mqtt: "+why, cl.Net.Remote)
		} else {
			h.b.refuse(EventAuthRefused, string(pk.Connect.Username), cl.Net.Remote, why)
		}
		return false
	}
	id.since = time.Now()
	h.b.guard.settled(cl.Net.Conn) // logged in: no longer counts against the login caps
	h.b.clients.Store(cl, id)
	h.b.log.Debug("mqtt client connected", "device", id.device, "account", id.account, "client", cl.ID, "listener", cl.Net.Listener, "remote", cl.Net.Remote)
	return true
}

func (h *hook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	// A shared subscription ($share/GROUP/FILTER) is allowed where FILTER is: the group
	// only spreads the messages over its members, each delivery checked as any other
	// (issue 54.2). A malformed one is refused as the $ topic it then is.
	if inner, shared, err := mqtttopic.Unshare(topic); !write && shared && err == nil {
		topic = inner
	}
	v, ok := h.b.clients.Load(cl)
	if !ok {
		// Not connected: a persistent session the broker delivers to while its client is
		// away, or one restored from the session store after a restart. Its client id
		// names its device (the rule at CONNECT), which must still be in good standing.
		if write {
			return false
		}
		device, _, _ := strings.Cut(cl.ID, "/")
		st, known := h.b.dir.Load().Device(device)
		return known && !st.Revoked && allowed(device, topic)
	}
	id := v.(identity)
	if id.account != "" {
		return h.accountACL(cl, id, topic, write)
	}
	device := id.device
	if allowed(device, topic) {
		return true
	}
	h.b.counts.topicRefused.Add(1)
	if n := id.refused.Add(1); n > int32(h.b.cfg.MaxRefusals) {
		if n == int32(h.b.cfg.MaxRefusals)+1 {
			h.b.log.Warn("an MQTT client passed its refusal budget; disconnecting it", "device", device, "client", cl.ID, "max_refusals", h.b.cfg.MaxRefusals)
			go h.b.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
		}
		return false
	}
	what := "subscribe to "
	if write {
		what = "publish to "
	}
	detail := "mqtt: " + what + topic + " (a device uses devices/" + device + "/ only)"
	if write {
		detail += publishRefusalEffect(cl)
	}
	if h.b.Violation != nil {
		h.b.Violation(device, detail, cl.Net.Remote)
	} else {
		h.b.refuse(EventACLRefused, device, cl.Net.Remote, detail)
	}
	return false
}

// OnDisconnect forgets the client; a persistent session of a device removed or revoked
// meanwhile (Revalidate disconnected it) is dropped, not kept for a device that is gone.
// accountACL is OnACLCheck for a platform app. A message its grants do not cover is
// simply not delivered to it; a subscription or publish it may not make is refused,
// audited (once a minute) and counted toward its connection's refusal budget.
func (h *hook) accountACL(cl *mqtt.Client, id identity, topic string, write bool) bool {
	if h.b.accountMay(id, topic, write) {
		return true
	}
	if !write && !strings.ContainsAny(topic, "+#") && h.b.subscribedTo(cl, topic) {
		return false // delivery of a message on a wildcard subscription: filtered, no refusal
	}
	h.b.counts.topicRefused.Add(1)
	if n := id.refused.Add(1); n > int32(h.b.cfg.MaxRefusals) {
		if n == int32(h.b.cfg.MaxRefusals)+1 {
			h.b.log.Warn("an MQTT client passed its refusal budget; disconnecting it", "account", id.account, "client", cl.ID, "max_refusals", h.b.cfg.MaxRefusals)
			go h.b.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
		}
		return false
	}
	what, need := "subscribe to ", registry.RightTelemetry
	if write {
		what, need = "publish to ", registry.RightCommand
	}
	detail := "mqtt: account " + id.account + ": " + what + topic + " (a platform app uses devices/NAME/ of devices it holds " + need + " on)"
	if write {
		detail += publishRefusalEffect(cl)
	}
	h.b.refuse(EventACLRefused, "", cl.Net.Remote, detail)
	return false
}

// publishRefusalEffect says what a refused publish does to the client's connection, so
// that an operator reading the event knows why a device dropped (issue 54.5): MQTT 3.1.1
// has no negative PUBACK, so a refused QoS 1 or 2 publish closes the connection, as the
// specification allows (MQTT-3.3.5-2); MQTT 5 answers "not authorized" and keeps it;
// a QoS 0 publish is dropped silently under both.
func publishRefusalEffect(cl *mqtt.Client) string {
	if cl.Properties.ProtocolVersion >= 5 {
		return "; MQTT 5: answered 'not authorized', connection kept"
	}
	return "; MQTT 3.1.1: at QoS 1 or 2 the connection is closed (no negative acknowledgement exists), at QoS 0 the message is dropped"
}

func (h *hook) OnDisconnect(cl *mqtt.Client, err error, expire bool) {
	h.b.clients.Delete(cl)
	if !expire && !cl.Net.Inline && !h.b.inGoodStanding(cl.ID) {
		h.b.dropSession(cl)
	}
}

// OnPublish stores messages on the configured topics and hands those the bridge sends
// out to its queue, before the broker acknowledges them: a QoS 1 or 2 message the store
// or the bridge's queue did not take is not acknowledged, so the client sends it again.
func (h *hook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	v, ok := h.b.clients.Load(cl)
	if !ok {
		// The bridge's own (inline) publishes of what came in from the centre: neither
		// stored nor sent back out.
		return pk, nil
	}
	id := v.(identity)
	if id.account != "" {
		return pk, nil // a platform app's command to a device: delivered, not stored or bridged
	}
	device := id.device
	stored := h.b.stored(pk.TopicName)
	if !stored {
		// Not a notification, but it costs the hub all the same (a retained message is
		// kept): the device's one budget, as for what it stores.
		if err := h.b.store.Admit(device, 1, len(pk.TopicName)+len(pk.Payload)); err != nil {
			return pk, h.overBudget(cl, pk, device, err)
		}
	}
	br := h.b.bridge
	if !stored && br == nil {
		return pk, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The store and the bridge's queue each commit to disk: both at once, so a message
	// waits for the slower of the two rather than their sum. If one refuses, the client
	// sends the message again and the other has it twice (at least once, as QoS 1).
	var serr, ferr error
	forward := func() error {
		return br.Forward(ctx, pk.TopicName, pk.Payload, pk.FixedHeader.Qos, pk.FixedHeader.Retain)
	}
	switch {
	case stored && br != nil:
		forwarded := make(chan error, 1)
		go func() { forwarded <- forward() }()
		serr = h.storeMessage(ctx, cl, device, pk)
		ferr = <-forwarded
	case br != nil:
		ferr = forward()
	default:
		serr = h.storeMessage(ctx, cl, device, pk)
	}
	if err := ferr; err != nil {
		h.b.notBridged(err, "the bridge's queue did not take a message; not acknowledged, the client will send it again", "device", device, "topic", pk.TopicName)
		return pk, packets.ErrRejectPacket
	}
	return pk, serr
}

// stored reports whether a topic's messages are stored as notifications.
func (b *Broker) stored(topic string) bool {
	for _, f := range b.cfg.Store {
		if mqtttopic.Match(f, topic) {
			return true
		}
	}
	return false
}

// storeMessage stores a message as a notification.
func (h *hook) storeMessage(ctx context.Context, cl *mqtt.Client, device string, pk packets.Packet) error {
	n := notification(device, pk.TopicName, pk.Payload)
	if _, err := h.b.store.Append(ctx, n); err != nil {
		if errors.Is(err, telemetry.ErrRateLimited) || errors.Is(err, telemetry.ErrDiskFull) {
			return h.overBudget(cl, pk, device, err)
		}
		if errors.Is(err, telemetry.ErrInvalid) {
			h.b.counts.notStored.Add(1)
			// The message itself cannot be stored (too large, a name too long): it is
			// still delivered, and the refusal is said once a minute.
			h.b.refuse(EventNotStored, device, cl.Net.Remote, "not stored as a notification: "+err.Error())
			return nil
		}
		h.b.log.Warn("storing an MQTT message failed; not acknowledged, the client will send it again", "device", device, "topic", pk.TopicName, "err", err)
		return packets.ErrRejectPacket
	}
	h.b.counts.stored.Add(1)
	return nil
}

// overBudget refuses a message the store would not take now (the device over its rate,
// the disk nearly full): an MQTT 5 client sending QoS 1 or 2 is told (PUBACK 0x97, quota
// exceeded), any other message is dropped unacknowledged, so QoS 1 and 2 come again.
func (h *hook) overBudget(cl *mqtt.Client, pk packets.Packet, device string, err error) error {
	h.b.refuse(EventNotStored, device, cl.Net.Remote, "refused: "+strings.TrimPrefix(err.Error(), "telemetry: "))
	// mochi answers a reason code only to MQTT 5 at QoS 1 and 2; any other code would
	// let the message through.
	switch {
	case cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos == 2:
		// mochi would answer a hook's refusal with a PUBACK, which is not part of the QoS 2
		// flow: the refusal goes in the PUBREC that ends it (MQTT 5 §4.3.3).
		cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID,
			ReasonCode: packets.ErrQuotaExceeded.Code, Properties: packets.Properties{ReasonString: packets.ErrQuotaExceeded.Reason}})
		return packets.ErrRejectPacket
	case cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos == 1:
		return packets.ErrQuotaExceeded
	}
	return packets.ErrRejectPacket
}
