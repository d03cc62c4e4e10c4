// Package mqttbridge is the hub broker's bridge to a central MQTT broker (paper 002's
// SSL/TLS bridge from a site to the cloud): one MQTT 3.1.1 or 5 client connection over
// TLS, with the central broker's CA pinned, carrying messages out (site to centre) and in
// (centre to site) by topic rules with local and remote prefixes, as Mosquitto's
// bridges write them.
//
// Outgoing QoS 1 and 2 messages are written to a queue on disk (bbolt, group-committed)
// before the site broker acknowledges them to the device, and leave it only when the
// central broker has acknowledged them: while the centre is unreachable they wait, in
// order and bounded, and a restart of either side loses none. Messages that came in over
// the bridge are never sent back out, and MQTT 5's no-local option keeps the centre
// from echoing the bridge's own messages back in.
//
// The client speaks MQTT through mochi-mqtt's packet codec (the broker's own), so the
// bridge's state machine and its disk queue are one piece rather than a second MQTT
// library with a store of its own.
package mqttbridge
