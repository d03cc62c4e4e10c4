package sshd

import (
	"errors"
	"fmt"
	"slices"

	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/tunnel"
)

// The gateway tier, gateway side: the uplink learns which devices this hub serves
// (Config.Relay, Serving) and carries the centre's connections to them (RelayTo).

// Served is what a device serves at this hub, as a gateway announces it upstream.
type Served struct {
	Aliases []string // sorted
	Key     string   // fingerprint of the key its session logged in with
	Client  string
	Cipher  string
	Remote  string
}

// relayChanged tells Config.Relay that what device serves changed.
func (s *Server) relayChanged(device string) {
	if r := s.cfg.Relay; r != nil {
		r(device)
	}
}

// Serving reports what a device serves at this hub now; ok is false when it serves
// nothing (no live session with a reverse forward). Devices behind a gateway of this
// hub are not served by it: a gateway relays its own devices only.
func (s *Server) Serving(device string) (sv Served, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.devices[device]
	if ds == nil || ds.forwards.len() == 0 {
		return sv, false
	}
	child := false
	ds.forwards.each(func(f *forward) {
		child = child || f.sess.gw != nil
		sv.Aliases = append(sv.Aliases, f.alias)
		// The session holding the forward (one per device, or the last listed).
		a := f.sess.algos
		sv.Key, sv.Client, sv.Cipher, sv.Remote = f.sess.keyFP, a.Client, a.Cipher, f.sess.remote
	})
	if child {
		return Served{}, false
	}
	slices.Sort(sv.Aliases)
	return sv, true
}

// ServingDevices lists the devices that serve at least one alias at this hub.
func (s *Server) ServingDevices() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, ds := range s.devices {
		if ds.forwards.len() > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// ErrNotServed means the device serves no such alias here now.
var ErrNotServed = errors.New("sshd: the device does not serve that alias here")

// RelayTo carries one connection that arrived for device/alias from elsewhere (the
// centre, over a gateway's uplink) to the device. It opens the device's end first and
// only then calls accept for the other end, so a connection the device cannot take is
// refused rather than accepted and dropped; the bytes then flow in the background. The
// device's channel limit applies as for a local connection; access was decided where
// the connection came in.
func (s *Server) RelayTo(device, alias, originAddr string, originPort uint32, accept func() (tunnel.Stream, error)) error {
	s.mu.Lock()
	var f *forward
	if ds := s.devices[device]; ds != nil {
		f = ds.forwards.get(alias)
	}
	s.mu.Unlock()
	if f == nil || f.sess.gw != nil {
		return fmt.Errorf("%w: %s/%s", ErrNotServed, device, alias)
	}
	st, kind, release, err := f.open(originAddr, originPort, "uplink "+originAddr)
	if err != nil {
		return err
	}
	c, err := accept()
	if err != nil {
		st.Close()
		release()
		return err
	}
	go func() {
		defer contain.Recover(f.sess.log, "relayed connection", c)
		f.sess.pipe(kind, alias, st, c, release)
	}()
	return nil
}
