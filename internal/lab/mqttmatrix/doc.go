// Package mqttmatrix is paper 002's benchmark (`iotsafe bench mqtt matrix`): the same
// MQTT load (mqtt-benchmark's 10 clients x 100 messages) against Mosquitto (Debian's,
// OpenSSL) and the hub's broker, over every chosen TLS version x cipher suite x QoS x
// MQTT version x link (loopback, or the lab's emulated Ethernet, Wi-Fi, LTE or 802.15.4
// with client and broker in namespaces of their own), beside plain MQTT (the ceiling)
// and the hub's SSH path (a device's MQTT through its agent). Cells a peer cannot run
// (DHE in Go; a TLS 1.3 suite Go will not be told to use) are reported with the
// reason, never left out silently.
package mqttmatrix
