// Package hostport checks the host:port addresses a configuration names, as a bind or a
// dial would take them, so that 'iotsafe hub --check-config' refuses what the start
// would fail on (a port that is no number, or out of range), with the field's name.
package hostport
