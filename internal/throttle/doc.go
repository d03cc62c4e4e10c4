// Package throttle bounds what one source (an address prefix) may cost a server before
// it has proved who it is: how many of its connections may be in a handshake at once,
// and how fast its failed handshakes are forgiven (OpenSSH's PerSourceMaxStartups and
// PerSourcePenalties in one mechanism). Connections over the limit wait their turn in a
// bounded queue instead of being refused, so a fleet behind one NAT address that
// reconnects at once still gets in, while a source that only fails is held to a few
// handshakes a second. It also has a small gate for rate-limited log lines.
package throttle
