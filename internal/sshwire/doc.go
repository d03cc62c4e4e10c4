// Package sshwire holds the bodies of the SSH connection protocol's port-forwarding
// messages (RFC 4254, section 7), which x/crypto/ssh leaves to its callers: one
// definition for the hub, the agent and the lab's fleet. Marshal and unmarshal them with
// ssh.Marshal and ssh.Unmarshal.
package sshwire
