package wsapi

import "github.com/prometheus/client_golang/prometheus"

// metrics are the API's: sockets and subscriptions held, actions run, pushes sent, and
// why sockets closed.
type metrics struct {
	sockets, subscriptions prometheus.Gauge
	actions                *prometheus.CounterVec
	closed                 *prometheus.CounterVec
	pushes, errors         prometheus.Counter
	refused                prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		sockets:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "iotsafe_websocket_sockets", Help: "DeviceHive WebSocket API sockets open."}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "iotsafe_websocket_subscriptions", Help: "Subscriptions held by the WebSocket API's sockets."}),
		actions:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_websocket_actions_total", Help: "Actions received on the WebSocket API, by action."}, []string{"action"}),
		closed:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_websocket_closed_total", Help: "WebSocket API sockets closed, by reason (client, silent, auth_timeout, slow, too_large, access_ended)."}, []string{"reason"}),
		pushes:        prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_websocket_pushes_total", Help: "Notifications and commands pushed to subscriptions."}),
		errors:        prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_websocket_errors_total", Help: "Actions answered with an error."}),
		refused:       prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_websocket_refused_total", Help: "Sockets refused at their upgrade (caps)."}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.sockets, m.subscriptions, m.actions, m.closed, m.pushes, m.errors, m.refused}
}
