// Package mqttload is the lab's MQTT load generator: N clients, each publishing M
// messages one at a time (the next once the broker has acknowledged the last, at the
// message's QoS), over plain TCP or TLS with a chosen version and suite, and the
// metrics of krylovsk/mqtt-benchmark, the tool paper 002 used (which this machine
// cannot install): total ratio, total and average runtime, message time min/max/mean/std
// per client and aggregated, average and total bandwidth in messages a second; and,
// for the paper's boxplots, percentiles of every message's time.
package mqttload
