package deviceplain

import (
	"context"
	"net"
	"net/http"
	"net/netip"

	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// proofKey holds, in the context of every connection of the plain listener, what the
// connection proves about its device.
type proofKey struct{}

// proof is what a plain connection proves: the session that handed it over, or that
// the kernel says the hub itself opened it (a forward the hub dialled over TCP, whose
// source address is then the device's). Neither: no device.
type proof struct {
	session deviceconn.Identity
	fromHub bool
}

func connContext(ctx context.Context, c net.Conn) context.Context {
	var p proof
	if id, ok := deviceconn.Of(c); ok {
		p.session = id
	} else {
		p.fromHub = deviceconn.FromHub(c)
	}
	return context.WithValue(ctx, proofKey{}, p)
}

// Plain reports whether r came in on the plain device listener (not the front door).
func Plain(r *http.Request) bool {
	_, ok := r.Context().Value(proofKey{}).(proof)
	return ok
}

// Via says how Device knew a request's device.
const (
	ViaSession = "session" // the SSH session handed the connection over
	ViaAddress = "address" // the hub opened it over TCP from the device's pool address
)

// Device is the device a request on the plain listener comes from, as snap knows it: the
// one whose SSH session handed the connection over (and only in the enrolment the
// session proved, not a later one of the same name), or, for a connection the hub
// itself opened over TCP, the one whose pool address it comes from. ok is false for
// anything else: another local user bound to a pool address, a request on the front
// door. via is ViaSession or ViaAddress.
func Device(r *http.Request, snap *devicedir.Snapshot) (st registry.DeviceState, via string, ok bool) {
	p, plain := r.Context().Value(proofKey{}).(proof)
	switch {
	case !plain:
	case p.session.Device != "":
		st, ok = snap.Device(p.session.Device)
		return st, ViaSession, ok && st.Gen() == p.session.Gen
	case p.fromHub:
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return st, "", false
		}
		st, ok = snap.ByAddress(ap.Addr().Unmap())
		return st, ViaAddress, ok
	}
	return st, "", false
}
