// Package scalebench is 'iotsafe bench scale', the gateway tier's lab (paper 000,
// sections VII and VIII): G gateway hubs, each in its own network namespace with M
// simulated devices, relay them to one central hub over one SSH session each; a few
// devices connect to the centre directly for comparison. It measures the centre's
// memory and descriptors per device, requests per second and the centre's CPU per
// request through gateways and directly, and how long until every device answers again
// after a gateway restart and after a centre restart, on the same socket address.
package scalebench
