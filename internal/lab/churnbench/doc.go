// Package churnbench is 'iotsafe bench churn': a hub under a churning fleet (issue 56).
// N real agent processes keep sessions to one hub; every interval a share of them is
// SIGKILLed (often while the hub opens one of their connections) and started again at
// once, while requests go through every device's protected socket. It records each
// restarted agent's time to a ready session again (p50/p99), the requests answered and
// refused, and the hub's memory and descriptors at the start and at the end, to see a
// leak. A hub that dies fails the run with the end of its log.
package churnbench
