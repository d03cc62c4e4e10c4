// Package migrate keeps an SQL database's schema at a version: numbered steps applied in
// order, each in its own transaction together with its record in a versions table, so
// a database is always at exactly one version, a failed step leaves it at the one
// before, and a database a newer build migrated is refused rather than misread. The
// registry and the telemetry store each have their own list of steps; steps are written
// once, in SQLite's spelling, and run on SQLite or PostgreSQL (package sqldb).
package migrate
