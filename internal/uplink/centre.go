package uplink

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Centre is the centre's side of a gateway's notification relay (sshd.TelemetrySink,
// which sshd's telemetry request handler calls): what gateways relay goes into the
// centre's store, once per gateway store and id; the store's fan-out takes it on to the
// centre's MQTT subscribers and bridge as any notification.
type Centre struct {
	store *telemetry.Store
	// received counts what each gateway's relay stored here (nil without metrics).
	received *prometheus.CounterVec
}

// NewCentre is the centre's sink over its store; with reg, it counts what each gateway
// relayed (iotsafe_relay_received_total).
func NewCentre(store *telemetry.Store, reg Registerer) (*Centre, error) {
	c := &Centre{store: store}
	if reg != nil {
		c.received = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iotsafe_relay_received_total",
			Help: "Notifications gateways relayed that this hub stored, by gateway (duplicates not counted)."}, []string{"gateway"})
		if err := reg.Register(c.received); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Registerer takes metrics (the hub's registry).
type Registerer interface {
	Register(cs ...prometheus.Collector) error
}

// RelayMark is the last id the centre stored from source.
func (r *Centre) RelayMark(ctx context.Context, source string) (uint64, error) {
	m, err := r.store.RelayMark(ctx, source)
	return uint64(m), err
}

// StoreRelayed stores a gateway's batch from source (step 4 of the relay, doc.go): what
// the store refuses is named per device in the answer, not failed whole.
func (r *Centre) StoreRelayed(ctx context.Context, source string, upto uint64, items []sshext.RelayedNotification) (sshext.TelemetryAck, error) {
	var ack sshext.TelemetryAck
	invalid := map[string]string{}
	ns := make([]telemetry.Relayed, 0, len(items))
	for _, it := range items {
		n := telemetry.Relayed{Origin: int64(it.ID), Notification: telemetry.Notification{Device: it.Device, Name: it.Name}}
		if it.Parameters != "" {
			n.Parameters = []byte(it.Parameters)
		}
		// The device's own time, or else when its gateway stored it: the centre's
		// timestamp is its own (the poll cursor), and a relay may run late.
		dt := time.UnixMicro(int64(orElse(it.DeviceTime, it.Stored))).UTC()
		if dt.UnixMicro() > 0 {
			n.DeviceTime = &dt
		}
		if err := n.Validate(); err != nil {
			if _, seen := invalid[it.Device]; !seen {
				invalid[it.Device] = err.Error()
			}
			continue
		}
		ns = append(ns, n)
	}
	stored, dups, mark, err := r.store.AppendRelayed(ctx, source, int64(upto), ns)
	if err != nil {
		return ack, err
	}
	if r.received != nil && len(stored) > 0 {
		gateway, _, _ := strings.Cut(source, "/") // sshd keys a source by its gateway's name
		r.received.WithLabelValues(gateway).Add(float64(len(stored)))
	}
	ack.Upto, ack.Stored, ack.Duplicates = uint64(mark), uint32(len(stored)), uint32(dups)
	for device, why := range invalid {
		ack.Refused = append(ack.Refused, sshext.TelemetryRefusal{Device: device, Why: why})
	}
	return ack, nil
}

// orElse is a if it is set, else b.
func orElse(a, b uint64) uint64 {
	if a != 0 {
		return a
	}
	return b
}
