// Package sshca is the deployment's OpenSSH certificate authority: its key in the data
// folder (mode 0600), the device (user) and hub (host) certificates it signs, and the
// OpenSSH key revocation list (KRL) that carries the registry's revocations to stock
// sshd and ssh-keygen.
//
// Which CAs the hub trusts, and which certificates are revoked, is the registry's
// (registry.SSHCA, registry.SSHCert): the key here only signs.
package sshca
