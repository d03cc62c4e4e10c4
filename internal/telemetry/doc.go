// Package telemetry is the hub's one notification store: every path a device may use to
// deliver data (REST with JWT, MQTT, SOAP, the SSH path's plain listeners) appends here,
// and every way a platform app reads (query, long poll, live stream) reads here.
//
// Writes go through one writer goroutine that commits whatever is queued in one
// transaction (group commit): a notification is durable before Append returns, yet the
// store pays one fsync per batch, not per notification. The queue is bounded; when it is
// full Append fails at once with ErrOverloaded (callers answer 503 with Retry-After).
//
// On the embedded default the store keeps its own SQLite file (telemetry.db) beside the
// registry: SQLite locks a whole file for writing, and a revocation must never wait
// behind a telemetry batch. When the registry is in PostgreSQL the store is a table in
// the same database, shared by every hub of the registry, with its own schema versions
// and its own writer lock (not the registry's). Hubs commit one batch at a time under
// that lock, with timestamps above every committed one, so a timestamp stays a lossless
// poll cursor across hubs; each hub's waiting readers are fed by follow, which reads
// what any hub committed when LISTEN/NOTIFY says so (or each second without it).
//
// The store is also the one place a notification fans out from (fanout.go): a
// subscriber (the MQTT broker, later other transports) sees every commit, this hub's
// and the other hubs', in order; the durable hook (the MQTT bridge's queue) holds what
// must be durable elsewhere too before a device is answered.
//
// Files by facet: store.go (configuration, schema, open and close), writer.go (the
// queue and the group commit), queries.go (get, list, poll, stream), retention.go (by
// age and count), follow.go (the other hubs' commits), fanout.go, guard.go (per-device
// budgets), once.go, relay.go (a gateway's store and its centre), removal.go,
// command.go, copy.go.
package telemetry
