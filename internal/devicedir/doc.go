// Package devicedir is the hub's in-memory directory of device identities for its
// telemetry paths (the REST API, the MQTT broker and the SOAP endpoint): each device's
// state and enrolment, its pool address, the hash of its telemetry secret, its current
// client certificate and SOAP keys, read from the registry as one
// snapshot and replaced whole when the registry changes. A request is checked against
// the snapshot without a registry query, and a revoked or removed device is refused as
// soon as the hub reloads it (on every change it makes or learns of). The directory is
// a read view: the registry stays the one place identities are kept and changed.
package devicedir
