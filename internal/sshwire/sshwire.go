package sshwire

// ForwardRequest is the body of a "tcpip-forward" or "cancel-tcpip-forward" global
// request: the address and port to listen on (iotsafe: the alias, and 0).
type ForwardRequest struct {
	Addr string
	Port uint32
}

// ForwardReply is a "tcpip-forward" success reply's body when the request asked for
// port 0: the port the server chose.
type ForwardReply struct{ Port uint32 }

// ForwardedTCPIP is the extra data of a "forwarded-tcpip" channel open: the listener the
// connection came in on, and the connection's origin.
type ForwardedTCPIP struct {
	Addr       string
	Port       uint32
	OriginAddr string
	OriginPort uint32
}

// DirectTCPIP is the extra data of a "direct-tcpip" channel open: where to connect
// (iotsafe: a direct alias), and the connection's origin on the client.
type DirectTCPIP struct {
	Host       string
	Port       uint32
	OriginAddr string
	OriginPort uint32
}
