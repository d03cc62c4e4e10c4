package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/contain"
)

// Config of the metrics endpoint.
type Config struct {
	// Listen is the address of /metrics; "" turns metrics off (the default).
	Listen string `yaml:"listen"`
	// PerDevice keeps series labelled by device (sessions, last seen, violations); on by
	// default. They cost the hub about 0.75 KiB of memory per device, and at 100,000
	// devices a scrape is about 15 MB: off leaves the hub-wide series only
	// (iotsafe_violations_total then has no device label).
	PerDevice *bool `yaml:"per_device"`
}

// perDevice reports whether series per device are kept.
func (c Config) perDevice() bool { return c.PerDevice == nil || *c.PerDevice }

// Metrics implements the SSH server's Metrics interface with Prometheus collectors.
type Metrics struct {
	reg        *prometheus.Registry
	sessions   prometheus.Gauge
	forwards   prometheus.Gauge
	channels   *prometheus.GaugeVec
	channelsT  *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	handshakes *prometheus.CounterVec
	throttled  *prometheus.CounterVec
	announced  prometheus.Counter
	proofs     *prometheus.CounterVec
	violations *prometheus.CounterVec
	lastSeen   *prometheus.GaugeVec
	online     *prometheus.GaugeVec
	// perDevice is false when cfg turns series per device off: violations is then
	// counted here, and the vectors above are not used.
	perDevice     bool
	violationsAll prometheus.Counter

	// seen counts each device's live sessions, for the devices that opened one and were
	// not forgotten since: a session's close noted after its device was removed (the
	// close comes from the session's own goroutine) must not bring its series back.
	mu   sync.Mutex
	seen map[string]int
}

// New registers the collectors.
func New(cfg Config) *Metrics {
	m := &Metrics{perDevice: cfg.perDevice(), seen: map[string]int{},
		reg:        prometheus.NewRegistry(),
		sessions:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "iotsafe_sessions", Help: "Live device SSH sessions."}),
		forwards:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "iotsafe_forwards", Help: "Reverse forwards (protected sockets) being served."}),
		channels:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "iotsafe_channels", Help: "Open channels by type."}, []string{"type"}),
		channelsT:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_channels_total", Help: "Channels opened by type."}, []string{"type"}),
		bytes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_bytes_total", Help: "Payload bytes carried; up is device to hub."}, []string{"direction"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_handshakes_total", Help: "SSH handshakes by result."}, []string{"result"}),
		throttled:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_ssh_throttled_total", Help: "Connections that waited for their source's handshake turn (waited) or were dropped for it (dropped)."}, []string{"result"}),
		announced:  prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_hostkey_announcements_total", Help: "Announcements of the hub's host keys to devices (a host key rotation)."}),
		proofs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_hostkey_proofs_total", Help: "Host key proofs devices asked for, by result (answered, refused)."}, []string{"result"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_violations_total", Help: "Profile violations per device."}, []string{"device"}),
		lastSeen:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "iotsafe_device_last_seen_seconds", Help: "Unix time a device's session last opened or closed."}, []string{"device"}),
		online:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "iotsafe_device_sessions", Help: "Live sessions per device."}, []string{"device"}),
	}
	m.reg.MustRegister(m.sessions, m.forwards, m.channels, m.channelsT, m.bytes, m.handshakes, m.throttled, m.announced, m.proofs,
		// go_gc_heap_live_bytes beside the MemStats series: the heap live after the last
		// GC, which tells a leak from garbage not collected yet (bench churn reads it).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), panicsCollector{})
	if m.perDevice {
		m.reg.MustRegister(m.violations, m.lastSeen, m.online)
	} else {
		m.violationsAll = prometheus.NewCounter(prometheus.CounterOpts{Name: "iotsafe_violations_total", Help: "Profile violations, all devices."})
		m.reg.MustRegister(m.violationsAll)
	}
	return m
}

func (m *Metrics) Handshake(ok bool) {
	r := "ok"
	if !ok {
		r = "failed"
	}
	m.handshakes.WithLabelValues(r).Inc()
}

func (m *Metrics) SessionOpened(d string) {
	m.sessions.Inc()
	if !m.perDevice {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[d]++
	m.online.WithLabelValues(d).Set(float64(m.seen[d]))
	m.lastSeen.WithLabelValues(d).SetToCurrentTime()
}

func (m *Metrics) SessionClosed(d string) {
	m.sessions.Dec()
	if !m.perDevice {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.seen[d]
	if !ok {
		return // forgotten: removed while this session was ending
	}
	m.seen[d] = max(0, n-1)
	m.online.WithLabelValues(d).Set(float64(m.seen[d]))
	m.lastSeen.WithLabelValues(d).SetToCurrentTime()
}

// Forget drops a removed device's series: without it a hub with device churn would
// keep every device it ever served in each scrape.
func (m *Metrics) Forget(d string) {
	if !m.perDevice {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, d)
	m.online.DeleteLabelValues(d)
	m.lastSeen.DeleteLabelValues(d)
	m.violations.DeleteLabelValues(d)
}

func (m *Metrics) ForwardOpened() { m.forwards.Inc() }
func (m *Metrics) ForwardClosed() { m.forwards.Dec() }

func (m *Metrics) ChannelOpened(kind string) {
	m.channels.WithLabelValues(kind).Inc()
	m.channelsT.WithLabelValues(kind).Inc()
}

func (m *Metrics) ChannelClosed(kind string) { m.channels.WithLabelValues(kind).Dec() }

func (m *Metrics) Bytes(up, down int64) {
	m.bytes.WithLabelValues("up").Add(float64(up))
	m.bytes.WithLabelValues("down").Add(float64(down))
}

func (m *Metrics) Violation(d string) {
	if m.perDevice {
		m.violations.WithLabelValues(d).Inc()
	} else {
		m.violationsAll.Inc()
	}
}

func (m *Metrics) Throttled(dropped bool) {
	r := "waited"
	if dropped {
		r = "dropped"
	}
	m.throttled.WithLabelValues(r).Inc()
}

func (m *Metrics) HostKeyAnnounced() { m.announced.Inc() }

func (m *Metrics) HostKeyProof(answered bool) {
	r := "answered"
	if !answered {
		r = "refused"
	}
	m.proofs.WithLabelValues(r).Inc()
}

// Register adds a subsystem's own collectors (each subsystem defines its metrics).
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// maxScrapersPerAddress bounds the connections one address holds (a scraper needs one).
const maxScrapersPerAddress = 16

// Serve listens on addr and serves /metrics until ctx ends. The listener is bound before
// Serve returns so the caller can report errors at start; log (nil discards) hears of
// accept errors, which never stop it.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	bound, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	ln := acceptor.LimitPerPeer(acceptor.Retrying(bound, "metrics", log), maxScrapersPerAddress, acceptor.PeerHost, nil)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener is gone; nothing else to do
		}
	}()
	return ln.Addr(), nil
}

// panicsCollector reports iotsafe_panics_total: the panics contained in connection
// goroutines (internal/contain), by component. It should stay at zero; anything else
// is a bug whose stack is in the log (event=panic).
type panicsCollector struct{}

var panicsDesc = prometheus.NewDesc("iotsafe_panics_total",
	"Panics contained in one connection's goroutine (the connection was closed, the hub went on), by component.", []string{"component"}, nil)

func (panicsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- panicsDesc }

func (panicsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range contain.Counts() {
		ch <- prometheus.MustNewConstMetric(panicsDesc, prometheus.CounterValue, float64(c.Panics), c.Component)
	}
}
