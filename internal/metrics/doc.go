// Package metrics exposes the hub's counters in Prometheus format on an opt-in
// loopback address: sessions, forwards, channels, bytes, handshakes, violations, last seen.
package metrics
