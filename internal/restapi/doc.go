// Package restapi is the hub's DeviceHive-compatible REST API (paper 004): devices log in
// for JSON Web Tokens and post notifications; platform apps (front-door accounts) query,
// long-poll and stream the notifications their grants cover. It is an adapter: identities
// come from the registry (through a snapshot the hub reloads on every registry change),
// notifications go to and come from the telemetry store.
//
// The same handler serves two listeners: the front door's HTTPS host at /api/rest, where
// callers present a token, and the hub's plain listener on loopback, which devices reach
// through a direct alias of their SSH session; there a device without a token is known
// by the pool address its forwards come from.
package restapi
