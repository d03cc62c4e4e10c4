// Package transport is the contract between the hub and its device transports (SOAP,
// MQTT; CoAP or a WebSocket API later). A transport gets what it needs in Deps — the
// device directory, the notification store, the audit log, the violation sink, a
// logger, metrics, where HTTP paths mount, where in-process listeners register, the
// front door's certificates and accounts — and nothing else of the hub; it offers a
// Transport: its listeners (which the ready file, iotsafe status, the hub's start lines
// and scan --hub read) and Close. The hub opens each transport from one entry in its
// list (hub/transports.go), so a new transport is its own package plus that entry.
//
// Notifications reach a transport through the store's fan-out (telemetry.Store's
// Subscribe and SetDurableHook), not through the hub.
package transport
