// Package jwtbench is 'iotsafe bench jwt', paper 004's experiment: simulated devices
// post notifications to the hub's DeviceHive-compatible REST API with JWT access tokens,
// swept over the number of devices and the token's algorithm (none, HS256, HS384,
// HS512), over three transports (HTTPS keep-alive as the paper, HTTPS with a new
// connection per request, and the device's SSH session without TLS or tokens). The
// simulator is its own process (RunSim); the hub's metrics give the JWT share of its
// work per request.
package jwtbench
