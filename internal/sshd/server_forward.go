package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshwire"
	"github.com/iotsafe/iotsafe/internal/tunnel"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// forward is one reverse alias being served: the protected socket's listener, whose
// connections become forwarded-tcpip channels to the device.
type forward struct {
	sess     *session
	alias    string
	bindAddr string // echoed back to the client exactly as it asked
	bindPort uint32
	socket   registry.Socket
	ln       io.Closer // its own listener, or its route on a shared listener
}

func (f *forward) stop() {
	f.ln.Close()
	f.sess.srv.metrics.ForwardClosed()
}

// handleRequest answers one global request of the device.
func (ss *session) handleRequest(req *ssh.Request) {
	if ss.handleGatewayRequest(req) {
		return
	}
	switch req.Type {
	case "tcpip-forward":
		port, err := ss.startForward(req.Payload)
		if err != nil {
			ss.log.Warn("reverse forward refused", "err", err)
			req.Reply(false, nil)
			ss.refused("") // the violation, if any, was recorded with its detail
			return
		}
		req.Reply(true, ssh.Marshal(sshwire.ForwardReply{Port: port}))
	case "cancel-tcpip-forward":
		var fr sshwire.ForwardRequest
		if ssh.Unmarshal(req.Payload, &fr) != nil {
			req.Reply(false, nil)
			return
		}
		req.Reply(ss.cancelForward(fr.Addr), nil)
	case sshext.CoalesceRequest:
		// The device trades latency for fewer packets on its link (agent --coalesce):
		// let TCP merge the hub's small SSH packets too (Nagle), as sshd does for
		// sessions without a terminal.
		if tc, ok := ss.tcp.(*net.TCPConn); ok {
			tc.SetNoDelay(false)
			ss.log.Debug("coalescing small packets to the device")
		}
		if req.WantReply {
			req.Reply(true, nil)
		}
	case hostkey.ProveRequest:
		ss.proveHostKeys(req)
	case "streamlocal-forward@openssh.com", "cancel-streamlocal-forward@openssh.com":
		// ssh -R /path:...: Unix-socket forwards are outside every profile.
		req.Reply(false, nil)
		ss.refused("Unix-socket forward requested (" + req.Type + ")")
	default:
		// keepalive@openssh.com, no-more-sessions@openssh.com and anything else.
		if req.WantReply {
			req.Reply(false, nil)
		}
	}
}

// startForward validates a tcpip-forward against the profile and binds the alias's
// protected socket. It returns the port to report to the client.
func (ss *session) startForward(payload []byte) (uint32, error) {
	s := ss.srv
	var fr sshwire.ForwardRequest
	if err := ssh.Unmarshal(payload, &fr); err != nil {
		ss.violate("malformed tcpip-forward request")
		return 0, fmt.Errorf("malformed request: %w", err)
	}
	alias := fr.Addr
	if err := checkReverse(ss.prof, fr); err != nil {
		ss.violate(err.Error())
		return 0, err
	}
	s.mu.Lock()
	if ss.forwards.get(alias) != nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("alias %q already forwarded by this session", alias)
	}
	count := ss.forwards.len()
	var holder *session
	if f := s.state(ss.device.Name).forwards.get(alias); f != nil {
		holder = f.sess
	}
	s.mu.Unlock()
	if count >= ss.prof.MaxForwards {
		ss.violate(fmt.Sprintf("reverse forward %q: over the limit of %d forwards (profile %q)", alias, ss.prof.MaxForwards, ss.prof.Name))
		return 0, fmt.Errorf("forward limit %d reached", ss.prof.MaxForwards)
	}
	if holder != nil {
		// Another session of this device serves the alias: take it over if it is stale.
		s.takeOverStale([]*session{holder}, s.cfg.TakeoverProbe, ss.remote)
		s.mu.Lock()
		f := s.state(ss.device.Name).forwards.get(alias)
		s.mu.Unlock()
		if f != nil {
			ss.violate(fmt.Sprintf("reverse forward %q: already served by a live session from %s", alias, f.sess.remote))
			return 0, fmt.Errorf("alias %q is served by another live session", alias)
		}
	}
	f, err := ss.bindForward(alias, fr.Addr, fr.Port)
	if err != nil {
		return 0, err
	}
	return f.bindPort, nil
}

// bindForward binds the protected socket of one of the session's aliases and serves it.
// bindAddr and bindPort are what the client asked for, echoed in forwarded-tcpip opens.
func (ss *session) bindForward(alias, bindAddr string, bindPort uint32) (*forward, error) {
	s := ss.srv
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	sock, created, err := s.store.EnsureSocket(ctx, ss.device.Name, alias)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("allocating socket for %q: %w", alias, err)
	}
	if created && s.cfg.SocketAllocated != nil {
		go s.cfg.SocketAllocated()
	}
	return ss.bindSocket(alias, bindAddr, bindPort, sock)
}

// bindSocket serves an allocated protected socket for one of the session's aliases.
func (ss *session) bindSocket(alias, bindAddr string, bindPort uint32, sock registry.Socket) (*forward, error) {
	s := ss.srv
	var err error
	f := &forward{sess: ss, alias: alias, bindAddr: bindAddr, bindPort: bindPort, socket: sock}
	if f.bindPort == 0 {
		f.bindPort = uint32(sock.Addr.Port())
	}
	var own net.Listener
	if s.cfg.Shared != nil {
		f.ln, err = s.cfg.Shared.Handle(sock.Addr, f.serve)
	} else if own, err = sockets.Listen(context.Background(), sock.Addr); err == nil {
		f.ln = own
	}
	if err != nil {
		ss.log.Error("cannot bind protected socket", "alias", alias, "socket", sock.Addr.String(), "err", err)
		return nil, fmt.Errorf("bind %s: %w", sock.Addr, err)
	}
	ln := f.ln
	s.mu.Lock()
	select {
	case <-ss.done:
		s.mu.Unlock()
		ln.Close()
		return nil, fmt.Errorf("session closed")
	default:
	}
	ss.forwards.set(f)
	s.state(ss.device.Name).forwards.set(f)
	s.mu.Unlock()
	s.metrics.ForwardOpened()
	ss.log.Info("reverse forward open", "alias", alias, "socket", sock.Addr.String())
	if own != nil {
		go f.accept(own)
	}
	s.relayChanged(ss.device.Name)
	return f, nil
}

func (ss *session) cancelForward(alias string) bool {
	s := ss.srv
	s.mu.Lock()
	f := ss.forwards.get(alias)
	if f != nil {
		ss.forwards.del(alias, f)
		if ds := s.devices[ss.device.Name]; ds != nil {
			ds.forwards.del(alias, f)
		}
	}
	s.mu.Unlock()
	if f == nil {
		return false
	}
	f.stop()
	s.relayChanged(ss.device.Name)
	return true
}

// accept turns each local connection to the protected socket into a channel to the device.
func (f *forward) accept(ln net.Listener) {
	acceptor.Serve(ln, acceptor.Config{Name: "protected socket", Logger: f.sess.log}, f.serve)
}

func (f *forward) serve(c net.Conn) {
	ss := f.sess
	if auth := ss.srv.cfg.Authorize; auth != nil {
		if err := auth(c, ss.device.Name, f.alias); err != nil {
			ss.log.Info("local connection refused", "alias", f.alias, "from", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
	}
	var originAddr string
	var originPort uint32
	if origin, _ := c.RemoteAddr().(*net.TCPAddr); origin != nil {
		originAddr, originPort = origin.IP.String(), uint32(origin.Port)
	}
	st, kind, release, err := f.open(originAddr, originPort, c.RemoteAddr().String())
	if err != nil {
		c.Close()
		return
	}
	ss.pipe(kind, f.alias, st, c, release)
}

// open opens the device's end of one connection to the alias, under the session's
// channel limit: a forwarded-tcpip channel, a stream of the session's multiplexed
// channel, or, for a device behind a gateway, a device channel on the gateway's
// session. release frees the channel slot once the connection is done; on an error
// the slot is already free and release is nil.
//
// Every way the device's end can fail (a refused channel, a gateway that refuses, a
// session that ends while the open is in flight) is an ordinary error here: issue 56
// was a nil release called on exactly those paths, which took the whole hub down.
func (f *forward) open(originAddr string, originPort uint32, from string) (tunnel.Stream, string, func(), error) {
	ss := f.sess
	if err := ss.acquireChannel(); err != nil {
		if err == errChannelLimit {
			ss.log.Warn("channel limit reached; refusing local connection", "alias", f.alias, "max_channels", ss.prof.MaxChannels, "from", from)
		}
		return nil, "", nil, err
	}
	var once sync.Once
	release := func() { once.Do(ss.releaseChannel) }
	st, kind, err := f.openDeviceEnd(originAddr, originPort)
	if err != nil {
		release()
		return nil, "", nil, err
	}
	return st, kind, release, nil
}

// openDeviceEnd opens the device's end of one connection, without the channel limit
// (open holds the slot). A refusal is logged here, once.
func (f *forward) openDeviceEnd(originAddr string, originPort uint32) (tunnel.Stream, string, error) {
	ss := f.sess
	if gw := ss.gw; gw != nil {
		if m := gw.mux.Load(); m != nil {
			// The gateway multiplexes: a stream, opened without a round trip.
			st, err := m.Open(zmux.Target{Kind: zmux.Relayed, Host: ss.device.Name + "/" + f.alias, OriginHost: originAddr, OriginPort: originPort})
			if err == nil {
				return st, kindViaGateway, nil
			}
		}
		ch, reqs, err := sshext.OpenChannel(gw.conn, gw.done, sshext.DeviceChannel, ssh.Marshal(sshext.DeviceOpen{
			Device: ss.device.Name, Alias: f.alias, OriginAddr: originAddr, OriginPort: originPort}))
		if err != nil {
			ss.log.Info("gateway refused the connection to its device", "event", "forward_refused", "alias", f.alias, "gateway", gw.device.Name, "err", err)
			return nil, "", err
		}
		go ssh.DiscardRequests(reqs)
		return ch, kindViaGateway, nil
	}
	p := sshwire.ForwardedTCPIP{Addr: f.bindAddr, Port: f.bindPort, OriginAddr: originAddr, OriginPort: originPort}
	if m := ss.mux.Load(); m != nil {
		// The device multiplexes (and maybe compresses) its connections in one channel. The
		// open is not confirmed; a device that cannot serve it resets the stream, which
		// closes the connection just as a refused channel would (pipe logs it).
		st, err := m.Open(zmux.Target{Kind: zmux.Forwarded, Host: p.Addr, Port: p.Port, OriginHost: p.OriginAddr, OriginPort: p.OriginPort})
		if err == nil {
			return st, kindForwarded, nil
		}
	}
	ch, reqs, err := sshext.OpenChannel(ss.conn, ss.done, "forwarded-tcpip", ssh.Marshal(p))
	if err != nil {
		ss.log.Info("device refused forwarded connection", "event", "forward_refused", "alias", f.alias, "err", err)
		return nil, "", err
	}
	go ssh.DiscardRequests(reqs)
	return ch, kindForwarded, nil
}

// The kinds of forwarded connection, as metrics count them.
const (
	kindForwarded  = "forwarded-tcpip"
	kindViaGateway = "via-gateway"
	kindDirect     = "direct-tcpip" // the device's own connection out, not a forward to it
)

// pipe carries one forwarded connection until both ends are done, counting it.
func (ss *session) pipe(kind, alias string, st tunnel.Stream, c io.ReadWriteCloser, done func()) {
	ss.srv.metrics.ChannelOpened(kind)
	r := tunnel.Pipe(st, c, done)
	ss.srv.metrics.Bytes(r.FromChannel, r.ToChannel)
	ss.srv.metrics.ChannelClosed(kind)
	var reset *zmux.ResetError
	switch {
	case r.Aborted == nil:
	case kind != kindDirect && r.FromChannel == 0 && errors.As(r.Aborted, &reset):
		// A multiplexed open is not confirmed: the device (or its gateway) refuses it by
		// resetting the stream before its first byte. Logged as a refused channel is.
		ss.log.Info("device refused forwarded connection", "event", "forward_refused", "alias", alias, "err", r.Aborted)
	default:
		// Per connection, so debug: a device whose service is down would fill the log.
		ss.log.Debug("forwarded connection aborted", "kind", kind, "alias", alias, "err", r.Aborted)
	}
}

// Why a forwarded connection could not get a channel: the device's own limit (its
// profile's max_channels: a violation) or the hub's memory budget (not the device's doing).
var (
	errChannelLimit = errors.New("channel limit reached")
	errHubBudget    = errors.New("the hub's memory budget for forwarded connections is spent; try again later")
)

func (ss *session) acquireChannel() error {
	if ss.channels.Add(1) > int32(ss.prof.MaxChannels) {
		ss.channels.Add(-1)
		return errChannelLimit
	}
	if !ss.srv.budget.take() {
		ss.channels.Add(-1)
		ss.srv.warnGated("forward budget", "hub-wide memory budget for forwarded connections spent; refusing new ones",
			"open", ss.srv.budget.max, "forward_memory_mib", ss.srv.cfg.ForwardMemoryMiB)
		return errHubBudget
	}
	return nil
}

func (ss *session) releaseChannel() {
	ss.channels.Add(-1)
	ss.srv.budget.give()
}

// handleChannel serves channel opens from the device. Only direct-tcpip to an alias of
// the profile is allowed; shells, exec, subsystems, agent and X11 are not.
func (ss *session) handleChannel(nc ssh.NewChannel) {
	switch nc.ChannelType() {
	case "direct-tcpip":
		ss.openDirect(nc)
	case sshext.MuxChannel:
		ss.openMux(nc)
	case "session":
		ss.reject(nc, ssh.Prohibited, "sessions (shell, exec, subsystem) are not available on an iotsafe hub; use ssh -N", "session channel requested (shell/exec/subsystem)")
	default:
		ss.reject(nc, ssh.UnknownChannelType, "channel type "+strconv.Quote(nc.ChannelType())+" is not available", "channel type "+strconv.Quote(nc.ChannelType())+" requested")
	}
}

// reject refuses a channel, records the violation and closes connections that keep
// trying (each rejected open costs the server memory).
func (ss *session) reject(nc ssh.NewChannel, why ssh.RejectionReason, msg, violation string) {
	nc.Reject(why, "iotsafe: "+msg)
	ss.refused(violation)
}

// refused records a refused channel or stream open or forward request, and closes
// connections that keep trying: each refusal costs the hub work and a registry write,
// so all of them share one budget per connection.
func (ss *session) refused(violation string) {
	if violation != "" {
		ss.violate(violation)
	}
	if n := ss.rejected.Add(1); n == int32(ss.srv.cfg.MaxRejectedChannels) {
		ss.violate(fmt.Sprintf("%d refused channel opens or forward requests: closing the connection", n))
		ss.close("too many refused channel opens or forward requests")
	}
}

// spent reports that the connection used up its refusal budget: what it already sent
// is dropped unread instead of processed (pipelined opens would otherwise run on).
func (ss *session) spent() bool {
	return ss.rejected.Load() >= int32(ss.srv.cfg.MaxRejectedChannels)
}

func (ss *session) violate(detail string) {
	ss.srv.violation(ss.device, ss.prof, detail, ss.remote)
}

func (ss *session) openDirect(nc ssh.NewChannel) {
	p, target, err := checkDirect(ss.prof, nc.ExtraData())
	if err != nil {
		ss.reject(nc, ssh.Prohibited, err.Error(), err.Error())
		return
	}
	if err := ss.acquireChannel(); err == errHubBudget {
		nc.Reject(ssh.ResourceShortage, "iotsafe: "+err.Error())
		return
	} else if err != nil {
		ss.reject(nc, ssh.ResourceShortage, fmt.Sprintf("channel limit %d reached", ss.prof.MaxChannels),
			fmt.Sprintf("direct forward %q: over the limit of %d open channels", p.Host, ss.prof.MaxChannels))
		return
	}
	// Dial off the channel loop so a slow target does not stall the session's other opens.
	go ss.dialDirect(nc, p.Host, target)
}

func (ss *session) dialDirect(nc ssh.NewChannel, alias, target string) {
	defer contain.Recover(ss.log, "direct forward", nil)
	c, err := ss.dialTarget(alias, target)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "iotsafe: "+err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		ss.releaseChannel()
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	ss.pipe(kindDirect, alias, ch, c, ss.releaseChannel)
}

// dialTarget connects a direct forward to its target. On failure it releases the
// channel slot and returns the text for the device.
func (ss *session) dialTarget(alias, target string) (net.Conn, error) {
	var c net.Conn
	var err error
	if l := ss.srv.cfg.Services.Lookup(target); l != nil {
		// One of the hub's own device listeners: handed over with the session's identity.
		ctx, cancel := context.WithTimeout(context.Background(), ss.srv.cfg.DialTimeout)
		c, err = l.Dial(ctx, deviceconn.Identity{Device: ss.device.Name, Gen: ss.device.CreatedAt.UnixMicro(), Address: ss.device.Address})
		cancel()
	} else {
		// Bind the source to the device's own pool address so the target can tell devices
		// apart and no device can pose as another.
		c, err = sockets.Dialer(ss.device.Address, ss.srv.cfg.DialTimeout).Dial("tcp", target)
	}
	if err != nil {
		ss.log.Warn("direct forward target unreachable", "alias", alias, "target", target, "err", err)
		ss.releaseChannel()
		return nil, fmt.Errorf("%s (%s) is unreachable", alias, target)
	}
	return c, nil
}

// checkReverse decides a tcpip-forward request against the profile; the error text is
// the violation recorded.
func checkReverse(p *profile.Profile, fr sshwire.ForwardRequest) error {
	want, ok := p.Reverse[fr.Addr]
	if !ok {
		return fmt.Errorf("reverse forward %q:%d: alias not in profile %q (ssh -R ALIAS:PORT:HOST:PORT, allowed: %v)", fr.Addr, fr.Port, p.Name, p.ReverseAliases())
	}
	if want != 0 && fr.Port != 0 && fr.Port != uint32(want) {
		return fmt.Errorf("reverse forward %q:%d: profile %q expects port %d", fr.Addr, fr.Port, p.Name, want)
	}
	return nil
}

// checkDirect parses a direct-tcpip open and decides it against the profile. The alias
// alone decides the target; the requested port is not used.
func checkDirect(p *profile.Profile, payload []byte) (sshwire.DirectTCPIP, string, error) {
	var d sshwire.DirectTCPIP
	if err := ssh.Unmarshal(payload, &d); err != nil {
		return d, "", fmt.Errorf("malformed direct-tcpip request")
	}
	target, err := directTarget(p, d.Host, d.Port)
	return d, target, err
}

// directTarget is the profile's target for a direct alias.
func directTarget(p *profile.Profile, alias string, port uint32) (string, error) {
	target, ok := p.Direct[alias]
	if !ok {
		return "", fmt.Errorf("direct forward to %q:%d: not a direct alias of profile %q", alias, port, p.Name)
	}
	return target, nil
}
