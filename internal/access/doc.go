// Package access decides who may reach which device service: the paper's permissions
// (operating-system users and groups) over strict (one device, one alias) and wide
// (a device group, every alias) security contexts.
//
// Policy is one immutable snapshot of the grants. Enforcer owns the hub's two local
// layers over it — the kernel's nftables rules (internal/firewall) and the user-space
// check of each local connection's owner — and the audit of what they refuse; the SSH
// server, the resolver and the front door are handed the same enforcer.
package access
