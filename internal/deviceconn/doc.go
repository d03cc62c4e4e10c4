// Package deviceconn carries what a device proved with the connections the hub makes for
// it. A direct forward of a device's SSH session to one of the hub's own device
// listeners (REST, SOAP, MQTT) is handed to that listener in process with the session's
// identity (Listener.Dial), instead of going out as a loopback connection whose only
// identity would be its source address — an address any local user can bind.
//
// Services is the hub's table of those listeners, by the address that profiles name
// them with. FromHub is the second layer for connections that still arrive over TCP:
// the kernel tells whose socket the peer is, and only the hub's own count as a device's
// forward.
package deviceconn
