// Package hostkey keeps the hub's SSH host keys in its data folder and rotates them
// without locking devices out.
//
// A device trusts the hub by its host key, and most devices cannot be reached to change
// that pin by hand. So a rotation has two steps with time between them:
//
//   - add: a next key is created beside the signing key (host_ed25519_key.next). The
//     hub announces its signing and next keys to devices with OpenSSH's
//     hostkeys-00@openssh.com, and proves it holds the next key when a device asks
//     (hostkeys-prove-00@openssh.com). OpenSSH clients with UpdateHostKeys, and iotsafe
//     agents with a known_hosts file, add the key they were proven; the registry
//     records which device learned it.
//   - promote: once the devices that matter have learned it (iotsafe hostkey list), the
//     next key replaces the signing key. Only its public part stays
//     (host_ed25519_key.retired.pub), so the hub keeps announcing the set without it:
//     the same clients then drop the retired key from their known_hosts.
//
// The files are OpenSSH private keys, mode 0600, created exclusively.
package hostkey
