// Package hub is ServerPX: it wires the registry, the protected-socket pool, the SSH
// server, the admin socket and metrics together and owns their lifecycle.
package hub
