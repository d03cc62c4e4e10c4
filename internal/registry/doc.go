// Package registry is PXdatabase: devices, keys, profiles, protected sockets, grants,
// accounts and audit events. It lives in SQLite in the data folder (WAL, shared safely by
// the hub and the admin commands) or, given a postgres:// DSN, in PostgreSQL, with the
// same schema (numbered migrations, package migrate), the same SQL (package sqldb) and
// the same one-writer-at-a-time transactions. CopyTo moves a registry between the two;
// a Lease keeps one hub serving from a shared database.
package registry
