// Package telemetry is the hub's one notification store: every path a device may use to
// deliver data (REST with JWT, MQTT, SOAP, the SSH path's plain listeners) appends here,
// and every way a platform app reads (query, long poll, live stream) reads here.
//
// Writes go through one writer goroutine that commits whatever is queued in one
// transaction (group commit): a notification is durable before Append returns, yet the
// store pays one fsync per batch, not per notification. The queue is bounded; when it is
// full Append fails at once with ErrOverloaded (callers answer 503 with Retry-After).
//
// The store keeps its own SQLite file (telemetry.db) beside the registry: SQLite locks a
// whole file for writing, and a revocation must never wait behind a telemetry batch.
package telemetry
