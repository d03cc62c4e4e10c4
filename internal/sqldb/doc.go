// Package sqldb is the one SQL handle the registry and the telemetry store use, for
// either of the two databases iotsafe runs on: SQLite in the data folder (the embedded
// default) or PostgreSQL (several hubs on one registry).
//
// Callers write their SQL once, with ? placeholders and SQLite's schema spelling; the
// handle rewrites both for PostgreSQL ($n placeholders; BIGINT, BYTEA and identity
// columns). Where SQLite serialises writers (BEGIN IMMEDIATE), a PostgreSQL handle can
// do the same across every hub with a transaction-scoped advisory lock, so code written
// for one writer at a time stays correct on a shared database. Within a process, the
// transactions of one SQLite handle take turns in the order they began, rather than
// polling SQLite's lock, which favours newcomers.
package sqldb
