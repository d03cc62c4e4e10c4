package restapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the API; Collectors registers them with the hub's registry.
type Metrics struct {
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	jwtVerify  *prometheus.HistogramVec
	jwtSig     *prometheus.HistogramVec
	stored     prometheus.Counter
	overloaded prometheus.Counter
	polls      prometheus.Gauge
}

// NewMetrics creates the collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_rest_requests_total", Help: "REST API requests by route and status code."}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "iotsafe_rest_request_seconds", Help: "REST API request handling time by route (long polls included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14)}, []string{"route"}),
		// Paper 004's two measures: the whole token processing (base64 string to checked
		// claims) and the signature check alone within it.
		jwtVerify: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "iotsafe_jwt_verify_seconds", Help: "Time to process one JWT: decode, signature and claims, by the algorithm of its key.",
			Buckets: prometheus.ExponentialBuckets(0.000001, 2, 16)}, []string{"alg"}),
		jwtSig: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "iotsafe_jwt_signature_seconds", Help: "Time of the signature check alone within iotsafe_jwt_verify_seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0000001, 2, 16)}, []string{"alg"}),
		stored:     prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_rest_notifications_stored_total", Help: "Notifications stored through the REST API."}),
		overloaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_rest_overloaded_total", Help: "Notifications refused with 503 because the store's queue was full."}),
		polls:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "iotsafe_rest_polls", Help: "Long polls and streams open."}),
	}
}

// Collectors lists the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency, m.jwtVerify, m.jwtSig, m.stored, m.overloaded, m.polls}
}

func (m *Metrics) observe(route string, code int, d time.Duration) {
	if route == "" || route == "/" {
		route = "other"
	}
	if code == 0 {
		code = 200
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// observeJWT records one verification; a token that named no known key counts as
// alg "unknown".
func (m *Metrics) observeJWT(alg string, total, sig time.Duration) {
	if alg == "" {
		alg = "unknown"
	}
	m.jwtVerify.WithLabelValues(alg).Observe(total.Seconds())
	if sig > 0 {
		m.jwtSig.WithLabelValues(alg).Observe(sig.Seconds())
	}
}
