package sshd

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshwire"
)

// The gateway tier, centre side: a session whose profile has a gateway policy announces
// the devices connected to the gateway. Each becomes a child session here, with the
// device's own protected sockets, grants and audit trail; connections to them travel as
// device channels over the gateway's session. The gateway side is Serving and RelayTo.

// GatewayStore is what the centre needs from the registry beyond Store.
type GatewayStore interface {
	ClaimDevice(ctx context.Context, name, gateway, devProfile string, maxDevices int) (*registry.Device, error)
}

// handleGatewayRequest answers the gateway requests; ok is false for other types.
func (ss *session) handleGatewayRequest(req *ssh.Request) (ok bool) {
	switch req.Type {
	case sshext.AnnounceRequest, sshext.WithdrawRequest:
	default:
		return false
	}
	if ss.prof.Gateway == nil {
		if req.WantReply {
			req.Reply(false, nil)
		}
		ss.refused(fmt.Sprintf("%s: not a gateway (profile %q has no gateway policy)", req.Type, ss.prof.Name))
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
	var a sshext.Announce
	if err := ssh.Unmarshal(req.Payload, &a); err != nil {
		req.Reply(false, nil)
		ss.refused("malformed device announcement")
		return true
	}
	req.Reply(true, ssh.Marshal(ss.announce(a)))
	return true
}

// announce admits a device the gateway serves, or updates the aliases it serves.
func (ss *session) announce(a sshext.Announce) sshext.AnnounceReply {
	s, g := ss.srv, ss.prof.Gateway
	gs, ok := s.store.(GatewayStore)
	if !ok {
		return sshext.AnnounceReply{Refused: "this hub cannot take devices behind gateways"}
	}
	refuse := func(violation, why string) sshext.AnnounceReply {
		if violation != "" {
			ss.refused(violation)
		}
		ss.log.Warn("device announcement refused", "announced", a.Device, "why", why)
		return sshext.AnnounceReply{Refused: why}
	}
	if !g.Allows(a.Device) {
		why := fmt.Sprintf("device %q is not among the names gateway %q may announce (%v)", a.Device, ss.device.Name, g.Devices)
		return refuse(why, why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	d, err := gs.ClaimDevice(ctx, a.Device, ss.device.Name, g.DeviceProfile, g.MaxDevices)
	switch {
	case errors.Is(err, registry.ErrClaimed), errors.Is(err, registry.ErrGatewayFull):
		return refuse(err.Error(), err.Error())
	case err != nil:
		ss.log.Error("registry: a gateway's device", "announced", a.Device, "err", err)
		return refuse("", "the centre cannot record the device now; try again")
	case d.Revoked():
		r := refuse("", fmt.Sprintf("device %q is revoked at the centre", d.Name))
		r.Revoked = true
		return r
	}
	prof, err := s.store.Profile(ctx, d.Profile)
	if err != nil {
		return refuse("", fmt.Sprintf("device %q has no usable profile %q at the centre", d.Name, d.Profile))
	}

	child, fresh := ss.child(d, prof, a)
	if child == nil {
		return refuse("", "the gateway's session is closing")
	}
	// Serve exactly the announced aliases the device's profile allows.
	var reply sshext.AnnounceReply
	var why []string
	for _, alias := range a.Aliases {
		if err := checkReverse(prof, sshwire.ForwardRequest{Addr: alias}); err != nil {
			ss.violate(fmt.Sprintf("gateway announced %s: %v", d.Name, err))
			why = append(why, err.Error())
			continue
		}
		s.mu.Lock()
		_, have := child.forwards[alias]
		s.mu.Unlock()
		if !have {
			if _, err := child.bindForward(alias, alias, 0); err != nil {
				why = append(why, fmt.Sprintf("alias %q: %v", alias, err))
				continue
			}
		}
		reply.Served = append(reply.Served, alias)
	}
	s.mu.Lock()
	var gone []string
	for alias := range child.forwards {
		if !slices.Contains(reply.Served, alias) {
			gone = append(gone, alias)
		}
	}
	s.mu.Unlock()
	for _, alias := range gone {
		child.cancelForward(alias)
	}
	if len(why) > 0 {
		reply.Why = fmt.Sprint(why)
	}
	if fresh {
		child.algos = registry.Algorithms{Key: a.Key, Client: a.Client, Cipher: a.Cipher}
		child.record()
		s.event(registry.Event{Device: d.Name, Kind: registry.EventSessionOpen, Remote: child.remote,
			Detail: fmt.Sprintf("via gateway %s: %s, %s, key %s", ss.device.Name, a.Client, a.Cipher, a.Key)})
		s.metrics.SessionOpened(d.Name)
		child.log.Info("device behind gateway up", "aliases", reply.Served)
	}
	return reply
}

// child returns the gateway session's child for d, making it if needed (fresh). A
// session of the device held by anything else (an older session of the gateway, say)
// is closed: the gateway that announces it now holds it.
func (ss *session) child(d *registry.Device, prof *profile.Profile, a sshext.Announce) (c *session, fresh bool) {
	s := ss.srv
	remote := fmt.Sprintf("%s via %s", a.Remote, ss.device.Name)
	s.mu.Lock()
	if ss.children == nil {
		select {
		case <-ss.done:
			s.mu.Unlock()
			return nil, false
		default:
		}
		ss.children = map[string]*session{}
	}
	if c := ss.children[d.Name]; c != nil {
		s.mu.Unlock()
		return c, false
	}
	var others []*session
	if ds := s.devices[d.Name]; ds != nil {
		for o := range ds.sessions {
			others = append(others, o)
		}
	}
	c = newSession(s, d, prof, remote)
	c.gw = ss
	c.keyFP = a.Key
	c.conn = nil
	close(c.ready)
	ss.children[d.Name] = c
	s.state(d.Name).sessions[c] = struct{}{}
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

// childEnded records the end of a device's session behind a gateway.
func (ss *session) childEnded() {
	s := ss.srv
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	s.store.TouchDevice(ctx, ss.device.Name)
	cancel()
	s.event(registry.Event{Device: ss.device.Name, Kind: registry.EventSessionClose, Remote: ss.remote})
	s.metrics.SessionClosed(ss.device.Name)
}

// tellGateway asks the gateway to close a device revoked or removed here.
func (ss *session) tellGateway(device, why string) {
	if ss.conn == nil {
		return
	}
	go ss.conn.SendRequest(sshext.CloseDeviceRequest, false, ssh.Marshal(sshext.CloseDevice{Device: device, Reason: why, Revoked: true}))
}
