// Package hubsbench is 'iotsafe bench hubs' (issue 18): several hubs on one PostgreSQL
// registry, each in a network namespace of its own on one Ethernet segment, and a fleet
// of real agents in another with every hub in their list. It measures what the issue's
// targets are about: how long a revocation written at one hub takes to close the
// session at the hub that holds it, and how long after a hub is killed every one of its
// devices answers again through another hub.
package hubsbench
