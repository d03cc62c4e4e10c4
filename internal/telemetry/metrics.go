package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the store's Observer for Prometheus: what a notification waits for before
// the hub answers it (the writer's queue, then its batch's transaction and fsync).
type Metrics struct {
	waited    prometheus.Histogram
	appended  prometheus.Histogram
	took      prometheus.Histogram
	batch     prometheus.Histogram
	committed prometheus.Counter
}

// NewMetrics creates the collectors; register them with Collectors.
func NewMetrics() *Metrics {
	lat := prometheus.ExponentialBuckets(0.00005, 2.5, 14) // 50 µs .. ~75 s
	return &Metrics{
		waited: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "iotsafe_telemetry_queue_wait_seconds",
			Help: "Time the oldest notification of a batch waited for the store's writer.", Buckets: lat}),
		appended: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "iotsafe_telemetry_append_seconds",
			Help: "Time from a request's queuing to its batch's commit: what each caller (a device's request, a relayed batch) waited for the store.", Buckets: lat}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "iotsafe_telemetry_commit_seconds",
			Help: "Time to write and commit one batch (inserts and fsync).", Buckets: lat}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "iotsafe_telemetry_batch_notifications",
			Help: "Notifications committed per batch.", Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
		committed: prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_telemetry_committed_total",
			Help: "Notifications committed by the store."}),
	}
}

// Collectors lists the collectors to register, with a gauge of s's queue.
func (m *Metrics) Collectors(s *Store) []prometheus.Collector {
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_telemetry_queue", Help: "Notifications waiting for the store's writer."},
		func() float64 { return float64(s.Queued()) })
	return []prometheus.Collector{m.waited, m.appended, m.took, m.batch, m.committed, queue}
}

// Appended implements the Observer's optional appendObserver.
func (m *Metrics) Appended(d time.Duration) { m.appended.Observe(d.Seconds()) }

// Committed implements Observer.
func (m *Metrics) Committed(batch, _ int, waited, took time.Duration) {
	m.waited.Observe(waited.Seconds())
	m.took.Observe(took.Seconds())
	m.batch.Observe(float64(batch))
	m.committed.Add(float64(batch))
}
