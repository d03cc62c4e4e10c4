// Package control is the one path every change to the fleet takes.
//
// A domain operation (revoke or remove a device, revoke a key, grant, set groups,
// accounts, passwords, tokens, secrets) is a Change. Control.Apply writes it to the
// registry and then fans it out to the hub's live subsystems through Live: SSH sessions
// close, the REST API, MQTT and SOAP drop what the device held, the access policy is
// rebuilt. The same Change reaches Apply from every caller: the admin socket (the CLI is a
// thin client of it), sshd's violation handling, the REST API, a gateway's uplink, and the
// CLI's offline mode when no hub runs (a Control with no Live: the registry write alone).
//
// Changes made elsewhere (another hub of a shared registry, a command run while the
// admin socket was unreachable) reach the live subsystems through Follow, which reads the
// registry's change feed and applies each event's consequences through the same Live.
package control
