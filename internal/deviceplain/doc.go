// Package deviceplain is the hub's plain HTTP listener for devices on their SSH session
// (rest.listen, on loopback). It belongs to the hub, not to one protocol: the device
// paths that speak HTTP (the REST API, SOAP) mount on it by path, as equals, and each
// learns who a request's device is the same way, from what its connection proved
// (Device): the SSH session that handed the connection over in process, or, for a
// connection the hub itself opened over TCP, its pool address. A local process that is
// neither proves no device.
//
// The MQTT broker's plain listener is its equal on another address: both register their
// in-process listener (deviceconn.Listener) in the hub's deviceconn.Services, through
// which sshd hands devices' direct forwards over.
package deviceplain
