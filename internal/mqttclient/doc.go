// Package mqttclient is a small MQTT 3.1.1 and 5 client over mochi-mqtt's packet codec
// (the hub broker's own): a connection that writes packets in runs (one flush), reads
// what a broker sends with a size bound, and connects with the options a bridge, a
// device or a load generator needs. It keeps no session state of its own: its callers
// (the broker's bridge, the demo, the lab) own their packet ids, windows and queues.
package mqttclient
