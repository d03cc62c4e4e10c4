// Package outagebench is 'iotsafe bench outage': how fast a fleet of agents is back
// after its hub was down (issue 21.4). N real agents (the agent package, in the bench's
// process, each with its own key and session) connect to a hub process; the hub is
// killed with SIGKILL, kept down for a while, and restarted on the same data folder and
// address. The bench records, per device, the time from the hub listening again to the
// device's session being ready (reverse forwards registered), every reconnect attempt
// (to see a thundering herd, or its absence), and the hub's CPU for the reconnections.
package outagebench
