// Package mqttbench is `iotsafe bench mqtt`, the lab of paper 002 (MQTT over TLS with
// site brokers bridged to a central broker).
//
// Its first experiment is the bridge's store-and-forward target: devices publish QoS 1
// readings to a hub whose bridge carries them to a central Mosquitto, and the central
// broker is stopped and restarted while they do; a reader at the centre checks that every
// reading the hub acknowledged arrives, in order per device, and counts duplicates.
// The devices are real Mosquitto clients (mosquitto_pub reading lines from standard
// input, one connection each); the reader is mosquitto_sub with a persistent session.
package mqttbench
