// Package sockets is PortPX: it hands out protected socket addresses from the reserved
// pool, one address per device and one port per reverse alias on that address.
package sockets
