package mqttbroker

import (
	"crypto/tls"
	"fmt"
	"slices"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iotsafe/iotsafe/internal/admin"
)

// counts are the broker's own counters (mochi's are read from its Info).
type counts struct {
	stored, authRefused, topicRefused, notStored, notBridged atomic.Int64
}

// Collectors are the broker's metrics, for the hub's /metrics: read when scraped.
func (b *Broker) Collectors() []prometheus.Collector {
	info := func(read func() int64) func() float64 {
		return func() float64 {
			if b.srv == nil {
				return 0
			}
			return float64(read())
		}
	}
	gauge := func(name, help string, read func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, info(read))
	}
	counter := func(name, help string, read func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, info(read))
	}
	cs := []prometheus.Collector{
		gauge("iotsafe_mqtt_clients", "MQTT clients connected.", func() int64 { return atomic.LoadInt64(&b.srv.Info.ClientsConnected) }),
		gauge("iotsafe_mqtt_sessions_away", "Persistent MQTT sessions whose client is not connected.", func() int64 { return atomic.LoadInt64(&b.srv.Info.ClientsDisconnected) }),
		gauge("iotsafe_mqtt_subscriptions", "MQTT subscriptions.", func() int64 { return atomic.LoadInt64(&b.srv.Info.Subscriptions) }),
		gauge("iotsafe_mqtt_inflight", "QoS 1 and 2 messages in flight to subscribers.", b.inflight),
		gauge("iotsafe_mqtt_retained", "Retained MQTT messages.", func() int64 { return atomic.LoadInt64(&b.srv.Info.Retained) }),
		counter("iotsafe_mqtt_messages_received_total", "PUBLISH packets received.", func() int64 { return atomic.LoadInt64(&b.srv.Info.MessagesReceived) }),
		counter("iotsafe_mqtt_messages_sent_total", "PUBLISH packets sent.", func() int64 { return atomic.LoadInt64(&b.srv.Info.MessagesSent) }),
		counter("iotsafe_mqtt_messages_dropped_total", "Messages dropped for slow subscribers.", func() int64 { return atomic.LoadInt64(&b.srv.Info.MessagesDropped) }),
		counter("iotsafe_mqtt_stored_total", "MQTT messages stored as notifications.", b.counts.stored.Load),
		counter("iotsafe_mqtt_auth_refused_total", "CONNECTs refused: no valid device identity.", b.counts.authRefused.Load),
		counter("iotsafe_mqtt_topic_refused_total", "Topics, wills or client identifiers refused to a known device (violations).", b.counts.topicRefused.Load),
		counter("iotsafe_mqtt_not_stored_total", "Messages on a stored topic the store refused as invalid (delivered all the same).", b.counts.notStored.Load),
		counter("iotsafe_mqtt_not_bridged_total", "Messages, and notifications stored another way (REST, SOAP, a gateway's relay), the bridge's queue did not take (full or failing): not acknowledged to their sender.", b.counts.notBridged.Load),
	}
	if b.bridge != nil {
		cs = append(cs, b.bridge.Collectors()...)
	}
	return cs
}

// inflight counts the QoS 1 and 2 messages in flight over every session, connected or
// away. mochi keeps a counter of its own (Info.Inflight) that goes below zero: messages
// restored from the session store at a start are counted out when acknowledged but were
// never counted in (issue 54.4). The sessions' own tables are the truth; reading them
// costs one pass over the clients, at a status call or a metrics scrape.
func (b *Broker) inflight() int64 {
	var n int64
	for _, cl := range b.srv.Clients.GetAll() {
		n += int64(cl.State.Inflight.Len())
	}
	return n
}

// Info is the broker's state for `iotsafe mqtt status`.
func (b *Broker) Info() *admin.MQTTInfo {
	if b.srv == nil {
		return nil
	}
	i := b.srv.Info
	info := &admin.MQTTInfo{
		Clients: atomic.LoadInt64(&i.ClientsConnected), SessionsAway: atomic.LoadInt64(&i.ClientsDisconnected),
		Subscriptions: atomic.LoadInt64(&i.Subscriptions), Retained: atomic.LoadInt64(&i.Retained), Inflight: b.inflight(),
		Received: atomic.LoadInt64(&i.MessagesReceived), Sent: atomic.LoadInt64(&i.MessagesSent), Stored: b.counts.stored.Load(),
		AuthRefused: b.counts.authRefused.Load(), TopicRefused: b.counts.topicRefused.Load(), NotBridged: b.counts.notBridged.Load(),
	}
	if b.bridge != nil {
		st := b.bridge.Status()
		info.Bridge = &st
	}
	return info
}

// Clients lists the connected clients (of device, if not ""), oldest login first.
func (b *Broker) Clients(device string) []admin.MQTTClient {
	var out []admin.MQTTClient
	b.clients.Range(func(k, v any) bool {
		cl, id := k.(*mqtt.Client), v.(identity)
		if device != "" && id.device != device {
			return true
		}
		c := admin.MQTTClient{ClientID: cl.ID, Device: id.device, Account: id.account, Listener: cl.Net.Listener, Remote: cl.Net.Remote,
			MQTT: protocolName(cl.Properties.ProtocolVersion), Since: id.since, Persistent: !sessionEndsWithConnection(cl),
			Subscriptions: cl.State.Subscriptions.Len(), Inflight: cl.State.Inflight.Len()}
		if tc, ok := rawConn(cl.Net.Conn).(tlsState); ok {
			st := tc.ConnectionState()
			c.TLS = tls.VersionName(st.Version) + " " + tls.CipherSuiteName(st.CipherSuite)
			if len(st.PeerCertificates) > 0 {
				c.TLS += ", client certificate"
			}
		}
		out = append(out, c)
		return true
	})
	slices.SortFunc(out, func(a, b admin.MQTTClient) int { return a.Since.Compare(b.Since) })
	return out
}

// protocolName is an MQTT protocol level's version.
func protocolName(level byte) string {
	switch level {
	case 3:
		return "3.1"
	case 4:
		return "3.1.1"
	case 5:
		return "5"
	}
	return fmt.Sprint(level)
}
