// Package mqttconns is issue 14's fleet experiment (`iotsafe bench mqtt connections`):
// N concurrent MQTT over TLS device connections (10,000 by default) on one broker, each
// publishing a QoS 1 reading once a second; every reading must be acknowledged, and the
// broker's memory per connection is measured idle and while publishing, for the hub's
// broker beside Mosquitto's in the same run.
package mqttconns
