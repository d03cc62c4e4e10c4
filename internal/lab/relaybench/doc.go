// Package relaybench is 'iotsafe bench relay', the lab of the gateway tier's telemetry
// (paper 000's three levels, one telemetry store): G gateway hubs, each with a backlog
// of notifications its devices stored while the centre was away, relay them into the
// central hub's store over their SSH sessions. It measures how fast the backlog drains
// and what each relayed notification costs the centre, beside the same number of
// notifications posted to the centre directly over its REST API (the path a device
// without a gateway takes) in the same run, and checks that each arrived once.
package relaybench
