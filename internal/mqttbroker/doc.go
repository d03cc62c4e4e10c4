// Package mqttbroker is the hub's MQTT broker (paper 002's site broker), built on
// mochi-mqtt: MQTT 3.1, 3.1.1 and 5, QoS 0-2, retained messages and wills. It keeps no
// identities of its own. A device is known by the hub's device directory: on the plain
// listener (loopback, reached over the device's SSH session by a direct alias) by the
// pool address its connections come from, on the TLS listener by its name and telemetry
// secret. A device publishes and subscribes only under devices/NAME/, its client
// identifier is its name (or NAME/anything, or empty for one the broker assigns), a
// revoked or removed device is disconnected when the hub reloads the directory, and
// messages on the configured topics are also stored as notifications in the telemetry
// store, where the REST API's readers see them.
package mqttbroker
