package sshd

import (
	"context"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// The gateway tier's telemetry, centre side: a gateway relays the notifications its
// devices stored there (sshext.TelemetryRequest). Each device must be the gateway's
// (its profile's gateway.devices, not claimed elsewhere, not revoked): a device that
// never served an alias through the gateway is recorded here at its first relayed
// notification, as an announcement would, without a session. What passes goes to
// Config.Telemetry, which stores it once per gateway store and id.

// maxRelayRefused bounds the refused devices a gateway session remembers; past it each
// refusal counts again.
const maxRelayRefused = 10000

// TelemetrySink stores what gateways relay: the hub's telemetry store.
type TelemetrySink interface {
	// RelayMark is the highest id of source's store this hub's store holds.
	RelayMark(ctx context.Context, source string) (uint64, error)
	// StoreRelayed stores a batch's items (of admitted devices) and moves source's mark
	// to upto. It answers with the mark, the counts and the items it refused itself
	// (invalid ones); an error means nothing was stored and the gateway should retry.
	StoreRelayed(ctx context.Context, source string, upto uint64, items []sshext.RelayedNotification) (sshext.TelemetryAck, error)
}

// handleTelemetryRequest answers a gateway's telemetry requests (its session's profile
// has a gateway policy: handleGatewayRequest checked).
func (ss *session) handleTelemetryRequest(req *ssh.Request) {
	s := ss.srv
	sink := s.cfg.Telemetry
	if sink == nil {
		s.debugGated("telemetry "+ss.device.Name, "a gateway relays notifications; this hub keeps none (no telemetry path configured)", "device", ss.device.Name)
		req.Reply(false, nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	if req.Type == sshext.TelemetryMarkRequest {
		var m sshext.TelemetryMark
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			ss.refused("malformed telemetry mark request: " + err.Error())
			req.Reply(false, nil)
			return
		}
		upto, err := sink.RelayMark(ctx, ss.relaySource(m.Source))
		if err != nil {
			ss.log.Error("telemetry: a gateway's relay mark", "err", err)
			req.Reply(false, nil)
			return
		}
		req.Reply(true, ssh.Marshal(sshext.TelemetryMarkReply{Upto: upto}))
		return
	}
	b, err := sshext.ParseTelemetry(req.Payload)
	if err != nil {
		ss.refused("malformed telemetry batch: " + err.Error())
		req.Reply(false, nil)
		return
	}
	req.Reply(true, sshext.MarshalTelemetryAck(ss.storeRelayed(ctx, sink, b)))
}

// relaySource keys a gateway's store at the centre by the gateway's own name, so no
// gateway can move another's mark.
func (ss *session) relaySource(source string) string { return ss.device.Name + "/" + source }

// storeRelayed admits a batch's devices and stores their items.
func (ss *session) storeRelayed(ctx context.Context, sink TelemetrySink, b sshext.TelemetryBatch) sshext.TelemetryAck {
	refusals, err := ss.admitRelayed(ctx, b.Items)
	if err != nil {
		ss.log.Error("registry: a gateway's relayed devices", "err", err)
		return sshext.TelemetryAck{Retry: true}
	}
	kept := b.Items[:0:0]
	for _, it := range b.Items {
		if _, no := refusals[it.Device]; !no {
			kept = append(kept, it)
		}
	}
	ack, err := sink.StoreRelayed(ctx, ss.relaySource(b.Source), b.Upto, kept)
	if err != nil {
		ss.srv.warnGated("telemetry store "+ss.device.Name, "a gateway's notifications could not be stored now; it sends them again", "device", ss.device.Name, "err", err)
		return sshext.TelemetryAck{Retry: true}
	}
	for _, r := range refusals {
		ack.Refused = append(ack.Refused, r)
	}
	return ack
}

// admitRelayed checks that every device of a batch is the gateway's, recording the ones
// the centre does not know yet; it returns the refused devices. A device admitted once
// is not looked up again until it is closed here (revoked or removed: KickKey).
func (ss *session) admitRelayed(ctx context.Context, items []sshext.RelayedNotification) (map[string]sshext.TelemetryRefusal, error) {
	s, g := ss.srv, ss.prof.Gateway
	refusals := map[string]sshext.TelemetryRefusal{}
	refuse := func(device, violation, why string, revoked bool) {
		// Once per device and session: a device posting every second must not make its
		// gateway's violations grow with its rate (the count still reaches on_violation
		// for a gateway that relays many names it may not).
		if violation != "" && !ss.relayRefused[device] {
			ss.violate(violation)
			if ss.relayRefused == nil {
				ss.relayRefused = map[string]bool{}
			}
			if len(ss.relayRefused) < maxRelayRefused {
				ss.relayRefused[device] = true
			}
		}
		s.warnGated("relay "+ss.device.Name+" "+device, "relayed notifications refused", "device", ss.device.Name, "of", device, "why", why)
		refusals[device] = sshext.TelemetryRefusal{Device: device, Why: why, Revoked: revoked}
	}
	var claims []registry.Claim
	seen := map[string]bool{}
	s.mu.Lock()
	for _, it := range items {
		if seen[it.Device] || s.relayAdmitted[it.Device] == ss.device.Name {
			continue
		}
		seen[it.Device] = true
		claims = append(claims, registry.Claim{Name: it.Device, Relayed: true})
	}
	s.mu.Unlock()
	var ask []registry.Claim
	for _, c := range claims {
		if why := ss.notAllowed(c.Name, "relay"); why != "" {
			refuse(c.Name, why, why, false)
			continue
		}
		ask = append(ask, c)
	}
	if len(ask) == 0 {
		return refusals, nil
	}
	gs, ok := s.store.(GatewayStore)
	if !ok {
		for _, c := range ask {
			refuse(c.Name, "", "this hub cannot take devices behind gateways", false)
		}
		return refusals, nil
	}
	claimed, err := gs.ClaimDevices(ctx, ss.device.Name, g.DeviceProfile, g.MaxDevices, ask)
	if err != nil {
		return nil, err
	}
	s.devicesAdded(claimed)
	for k, c := range claimed {
		name := ask[k].Name
		if violation, why, revoked := claimRefusal(c); why != "" {
			refuse(name, violation, why, revoked)
			continue
		}
		s.mu.Lock()
		s.relayAdmitted[name] = ss.device.Name
		s.mu.Unlock()
	}
	return refusals, nil
}

// devicesAdded tells the hub when a claim recorded new devices (Config.DevicesAdded).
func (s *Server) devicesAdded(claimed []registry.Claimed) {
	if s.cfg.DevicesAdded == nil {
		return
	}
	for _, c := range claimed {
		if c.Created {
			s.cfg.DevicesAdded()
			return
		}
	}
}
