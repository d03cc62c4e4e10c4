// Package registry is PXdatabase: devices, keys, profiles, protected sockets and audit
// events, kept in SQLite (WAL, shared safely by the hub and the admin commands).
package registry
