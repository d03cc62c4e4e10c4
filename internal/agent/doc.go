// Package agent is SecurePX, the device side: it keeps one SSH session to the hub,
// exposes local services through reverse forwards and reaches hub services through
// direct forwards, reconnecting with backoff and pinning the hub's host key.
package agent
