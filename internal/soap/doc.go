// Package soap is the hub's endpoint for SOAP device messages secured with paper 001's
// compact WS-Security (package wssec): it verifies and decrypts a WS Compact Security or
// WS Security Record message with the device's pre-shared key (from the registry,
// through the hub's device directory), stores the payload as a notification in the one
// telemetry store (so REST and MQTT readers see it), and answers with a response sealed
// the same way. Every refusal is a SOAP 1.2 fault with a WS-Security fault code, an
// audit event, and, where the sender is known, a profile violation.
//
// The handler serves the front door at /soap and the hub's plain loopback listener, which
// devices reach through a direct alias of their SSH session; there the device is also
// known by its pool address, and the key must be that device's.
//
// payload.go has the device message's payload convention (a Notification element), used
// by the endpoint and by the device side, iotsafe soap send (client.go).
package soap
