package mqttbridge

import "github.com/prometheus/client_golang/prometheus"

// Collectors are the bridge's metrics, for the hub's /metrics: read when scraped.
func (b *Bridge) Collectors() []prometheus.Collector {
	gauge := func(name, help string, read func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, read)
	}
	counter := func(name, help string, read func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(read()) })
	}
	return []prometheus.Collector{
		gauge("iotsafe_mqtt_bridge_connected", "1 while the bridge is connected to the central broker.", func() float64 {
			if b.connected.Load() {
				return 1
			}
			return 0
		}),
		gauge("iotsafe_mqtt_bridge_queue_messages", "Outgoing messages waiting in the bridge's queue.", func() float64 { n, _ := b.q.Len(); return float64(n) }),
		gauge("iotsafe_mqtt_bridge_queue_bytes", "Bytes of outgoing messages waiting in the bridge's queue.", func() float64 { _, n := b.q.Len(); return float64(n) }),
		counter("iotsafe_mqtt_bridge_sent_total", "Messages sent to the central broker (again after a reconnection included).", b.sent.Load),
		counter("iotsafe_mqtt_bridge_delivered_total", "Messages the central broker acknowledged.", b.delivered.Load),
		counter("iotsafe_mqtt_bridge_refused_total", "Messages the central broker refused (dropped).", b.refused.Load),
		counter("iotsafe_mqtt_bridge_dropped_total", "Messages dropped: QoS 0 while down, or the oldest by queue.overflow drop_oldest.", func() int64 { return b.dropped0.Load() + b.q.Dropped() }),
		counter("iotsafe_mqtt_bridge_received_total", "Messages that came in from the central broker.", b.received.Load),
		counter("iotsafe_mqtt_bridge_reconnects_total", "Reconnections to the central broker.", b.reconnects.Load),
	}
}
