package sshd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshwire"
)

// The gateway tier, centre side: a session whose profile has a gateway policy announces
// the devices connected to the gateway. Each becomes a child session here, with the
// device's own protected sockets, grants and audit trail; connections to them travel as
// streams of the gateway's multiplexed channel (or device channels, without one) over
// the gateway's session. The gateway side is Serving and RelayTo.

// GatewayStore is what the centre needs from the registry beyond Store.
type GatewayStore interface {
	ClaimDevices(ctx context.Context, gateway, devProfile string, maxDevices int, claims []registry.Claim) ([]registry.Claimed, error)
}

// handleGatewayRequest answers the gateway requests; ok is false for other types.
func (ss *session) handleGatewayRequest(req *ssh.Request) (ok bool) {
	switch req.Type {
	case sshext.AnnounceRequest, sshext.WithdrawRequest, sshext.TelemetryMarkRequest, sshext.TelemetryRequest:
	default:
		return false
	}
	if ss.prof.Gateway == nil {
		ss.refused(fmt.Sprintf("%s: not a gateway (profile %q has no gateway policy)", req.Type, ss.prof.Name))
		if req.WantReply {
			req.Reply(false, nil)
		}
		return true
	}
	if req.Type == sshext.TelemetryMarkRequest || req.Type == sshext.TelemetryRequest {
		ss.handleTelemetryRequest(req)
		return true
	}
	if req.Type == sshext.WithdrawRequest {
		var w sshext.Withdraw
		if ssh.Unmarshal(req.Payload, &w) == nil {
			ss.withdraw(w.Device, "withdrawn by its gateway")
		}
		if req.WantReply {
			req.Reply(true, nil)
		}
		return true
	}
	as, err := sshext.ParseAnnounces(req.Payload)
	if err != nil {
		ss.refused("malformed device announcement: " + err.Error())
		req.Reply(false, nil)
		return true
	}
	req.Reply(true, sshext.MarshalAnnounceReplies(ss.announce(as)))
	return true
}

// announce admits the devices of one announcement (a batch) or updates the aliases they
// serve; it answers each in order.
func (ss *session) announce(as []sshext.Announce) []sshext.AnnounceReply {
	s, g := ss.srv, ss.prof.Gateway
	replies := make([]sshext.AnnounceReply, len(as))
	gs, ok := s.store.(GatewayStore)
	if !ok {
		for i := range replies {
			replies[i].Refused = "this hub cannot take devices behind gateways"
		}
		return replies
	}
	refuse := func(i int, violation, why string) {
		if violation != "" {
			// A violation of the gateway (its on_violation applies, the audit is gated),
			// not a refusal that spends its connection's budget: a gateway whose profile
			// leaves out some of its devices must not lose the others with its session.
			ss.violate(violation)
		}
		s.warnGated("announce "+ss.device.Name+" "+as[i].Device, "device announcement refused",
			"device", ss.device.Name, "announced", as[i].Device, "why", why)
		replies[i].Refused = why
	}
	var claims []registry.Claim
	var idx []int // claims[k] answers as[idx[k]]
	for i, a := range as {
		if why := ss.notAllowed(a.Device, "announce"); why != "" {
			refuse(i, why, why)
			continue
		}
		if err := a.Check(); err != nil {
			why := fmt.Sprintf("malformed announcement of %q: %v", a.Device, err)
			refuse(i, why, why)
			continue
		}
		claims = append(claims, registry.Claim{Name: a.Device, Aliases: a.Aliases, Remote: ss.childRemote(a),
			Algos: registry.Algorithms{Key: a.Key, Client: a.Client, Cipher: a.Cipher}})
		idx = append(idx, i)
	}
	if len(claims) == 0 {
		return replies
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	claimed, err := gs.ClaimDevices(ctx, ss.device.Name, g.DeviceProfile, g.MaxDevices, claims)
	if err != nil {
		ss.log.Error("registry: a gateway's devices", "devices", len(claims), "err", err)
		for _, i := range idx {
			refuse(i, "", "the centre cannot record the device now; try again")
		}
		return replies
	}
	s.devicesAdded(claimed)
	// One copy of each profile for the whole batch: children share it.
	profiles := map[string]*profile.Profile{}
	for k, c := range claimed {
		i, a := idx[k], as[idx[k]]
		if violation, why, revoked := claimRefusal(c); why != "" {
			refuse(i, violation, why)
			replies[i].Revoked = revoked
			continue
		}
		prof := profiles[c.Device.Profile]
		if prof == nil {
			if prof, err = s.store.Profile(ctx, c.Device.Profile); err != nil {
				refuse(i, "", fmt.Sprintf("device %q has no usable profile %q at the centre", c.Device.Name, c.Device.Profile))
				continue
			}
			profiles[c.Device.Profile] = prof
		}
		replies[i] = ss.serveChild(c.Device, prof, a)
	}
	return replies
}

// notAllowed says why a gateway may not announce or relay (what) the device, or "".
func (ss *session) notAllowed(device, what string) string {
	if g := ss.prof.Gateway; !g.Allows(device) {
		return fmt.Sprintf("device %q is not among the names gateway %q may %s (%v)", device, ss.device.Name, what, g.Devices)
	}
	return ""
}

// claimRefusal reads one answer of ClaimDevices: why the device is refused ("" if it
// is the gateway's), whether that is a violation of the gateway (another gateway's or a
// direct device, the gateway's limit), and whether the device is revoked here.
func claimRefusal(c registry.Claimed) (violation, why string, revoked bool) {
	switch {
	case errors.Is(c.Err, registry.ErrClaimed), errors.Is(c.Err, registry.ErrGatewayFull):
		return c.Err.Error(), c.Err.Error(), false
	case c.Err != nil:
		return "", c.Err.Error(), false
	case c.Device.Revoked():
		return "", fmt.Sprintf("device %q is revoked at the centre", c.Device.Name), true
	}
	return "", "", false
}

// childRemote is how the centre records where a device behind the gateway is.
func (ss *session) childRemote(a sshext.Announce) string {
	return fmt.Sprintf("%s via %s", a.Remote, ss.device.Name)
}

// serveChild makes (or finds) the device's child session and serves exactly the
// announced aliases its profile allows.
func (ss *session) serveChild(d *registry.Device, prof *profile.Profile, a sshext.Announce) sshext.AnnounceReply {
	s := ss.srv
	child, fresh := ss.child(d, prof, a)
	if child == nil {
		return sshext.AnnounceReply{Refused: "the gateway's session is closing"}
	}
	sockets := map[string]registry.Socket{}
	for _, so := range d.Sockets {
		sockets[so.Alias] = so
	}
	var reply sshext.AnnounceReply
	var why []string
	for _, alias := range a.Aliases {
		if err := checkReverse(prof, sshwire.ForwardRequest{Addr: alias}); err != nil {
			ss.violate(fmt.Sprintf("gateway announced %s: %v", d.Name, err))
			why = append(why, err.Error())
			continue
		}
		s.mu.Lock()
		have := child.forwards.get(alias) != nil
		s.mu.Unlock()
		if !have {
			so, ok := sockets[alias]
			var err error
			if ok {
				_, err = child.bindSocket(alias, alias, 0, so)
			} else {
				_, err = child.bindForward(alias, alias, 0)
			}
			if err != nil {
				why = append(why, fmt.Sprintf("alias %q: %v", alias, err))
				continue
			}
		}
		reply.Served = append(reply.Served, alias)
	}
	s.mu.Lock()
	var gone []string
	child.forwards.each(func(f *forward) {
		if !slices.Contains(reply.Served, f.alias) {
			gone = append(gone, f.alias)
		}
	})
	s.mu.Unlock()
	for _, alias := range gone {
		child.cancelForward(alias)
	}
	if len(why) > 0 {
		reply.Why = fmt.Sprint(why)
	}
	if fresh {
		s.metrics.SessionOpened(d.Name)
		child.log.Info("device behind gateway up", "aliases", reply.Served)
	}
	return reply
}

// closedChan is the ready channel of every child session: a child is attached from
// its first moment (and one shared closed channel costs nothing per device).
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// child returns the gateway session's child for d, making it if needed (fresh). A
// session of the device held by anything else (an older session of the gateway, say)
// is closed: the gateway that announces it now holds it.
func (ss *session) child(d *registry.Device, prof *profile.Profile, a sshext.Announce) (c *session, fresh bool) {
	s := ss.srv
	s.mu.Lock()
	select {
	case <-ss.done:
		s.mu.Unlock()
		return nil, false
	default:
	}
	if ss.children == nil {
		ss.children = map[string]*session{}
	}
	if c := ss.children[d.Name]; c != nil {
		s.mu.Unlock()
		return c, false
	}
	var others []*session
	if ds := s.devices[d.Name]; ds != nil {
		others = append(others, ds.sessions...)
	}
	c = &session{srv: s, device: d, prof: prof, remote: ss.childRemote(a), gw: ss, keyFP: a.Key,
		log: s.log.With("device", d.Name, "via", ss.device.Name), ready: closedChan, done: make(chan struct{}),
	}
	ss.children[d.Name] = c
	s.state(d.Name).sessions.add(c)
	s.mu.Unlock()
	for _, o := range others {
		o.close("taken over by gateway " + ss.device.Name)
	}
	return c, true
}

// withdraw ends the child session of a device the gateway no longer serves.
func (ss *session) withdraw(device, why string) {
	ss.srv.mu.Lock()
	c := ss.children[device]
	ss.srv.mu.Unlock()
	if c != nil {
		c.close(why)
	}
}

// childrenEnded records the end of sessions behind a gateway in one registry write.
func (s *Server) childrenEnded(names []string, remote string) {
	if len(names) == 0 {
		return
	}
	for _, n := range names {
		s.metrics.SessionClosed(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.store.EndSessions(ctx, names, remote); err != nil {
		s.log.Error("recording the end of sessions behind a gateway failed", "devices", len(names), "err", err)
	}
}

// announceAgain tells the gateway that the centre closed one of its devices without
// revoking it: the gateway announces it again, and it comes back under what the centre
// holds now (its profile).
func (ss *session) announceAgain(device, why string) {
	if ss.conn == nil {
		return
	}
	go ss.conn.SendRequest(sshext.CloseDeviceRequest, false, ssh.Marshal(sshext.CloseDevice{Device: device, Reason: why}))
}

// tellGateway asks the gateway to close a device revoked or removed here.
func (ss *session) tellGateway(device, why string) {
	if ss.conn == nil {
		return
	}
	go ss.conn.SendRequest(sshext.CloseDeviceRequest, false, ssh.Marshal(sshext.CloseDevice{Device: device, Reason: why, Revoked: true}))
}
