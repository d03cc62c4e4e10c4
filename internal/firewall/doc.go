// Package firewall enforces who may reach a protected socket: in user space by asking
// the kernel which uid owns the peer of each accepted connection (sock_diag), and (later)
// in the kernel with the hub's own nftables table.
package firewall
