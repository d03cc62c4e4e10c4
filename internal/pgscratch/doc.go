// Package pgscratch starts a real PostgreSQL server for tests and labs: Debian's server
// binaries, a scratch cluster in a temporary folder, owned by and run as an
// unprivileged user (nobody, when the caller is root: PostgreSQL refuses to run as
// root), reachable only through a Unix socket in that folder, and stopped and removed
// after. Each test gets its own database on the shared server. Packages whose code runs
// on both databases run their whole suite twice (Twice: SQLite, then PostgreSQL).
package pgscratch
