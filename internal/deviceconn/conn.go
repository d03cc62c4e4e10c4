package deviceconn

import (
	"net"
	"net/netip"
	"os"

	"github.com/iotsafe/iotsafe/internal/firewall"
)

// Identity is what a device proved to the hub on its SSH session: its name, the
// enrolment it authenticated as (registry.DeviceState.Gen: a device removed and enrolled
// again under the same name is another one) and its pool address.
type Identity struct {
	Device  string
	Gen     int64
	Address netip.Addr
}

// Conn is the listener's end of a connection handed over in process: the session's
// identity travels with it, so no handler needs to guess it from an address.
type Conn struct {
	net.Conn
	id    Identity
	local net.Addr
}

// Identity is the device the connection belongs to.
func (c *Conn) Identity() Identity { return c.id }

// RemoteAddr is the device's pool address (port 0): per-address logs and limits keep
// working; identity never comes from it.
func (c *Conn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: c.id.Address.AsSlice()} }

// LocalAddr is the address of the TCP listener this one stands beside.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// CloseWrite half-closes, as a TCP connection does, so a client's end of request reaches
// the server as EOF.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Of is the identity a connection carries, if it was handed over by a device's session.
func Of(c net.Conn) (Identity, bool) {
	if dc, ok := c.(*Conn); ok {
		return dc.id, true
	}
	return Identity{}, false
}

// FromHub reports whether the peer of c, a TCP connection accepted from this host, is a
// socket of the hub's own uid: only then can its source address be a device's forward
// (the kernel layer also keeps every other uid from sending from a pool address). A peer
// on another host, a socket that is gone, or a connection that is not TCP is not.
func FromHub(c net.Conn) bool {
	uid, err := firewall.PeerUID(c)
	return err == nil && uid == selfUID
}

var selfUID = uint32(os.Getuid())
