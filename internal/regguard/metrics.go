package regguard

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors report what the guard holds in memory because the registry cannot write.
func (g *Guard) Collectors() []prometheus.Collector {
	state := func(f func(*State) int) func() float64 {
		return func() float64 {
			if st := g.Degraded(); st != nil {
				return float64(f(st))
			}
			return 0
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_registry_degraded",
			Help: "1 while the registry cannot write and the hub holds revocations, violations or audit events in memory."},
			state(func(*State) int { return 1 })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_registry_held_revocations", Help: "Revocations held in memory, not yet written."},
			state(func(s *State) int { return s.Revocations })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_registry_held_events", Help: "Audit events held in memory, not yet written."},
			state(func(s *State) int { return s.Events })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_registry_dropped_events", Help: "Audit events dropped from the full in-memory backlog in this episode."},
			state(func(s *State) int { return s.Dropped })),
	}
}
