// Package sshext names iotsafe's own SSH extensions, shared by the agent and the hub.
// Stock clients never use them and lose nothing; the hub ignores or refuses them for
// devices whose profile does not allow them.
package sshext
