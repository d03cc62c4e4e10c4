package sshd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// session is one authenticated SSH connection of a device.
type session struct {
	srv    *Server
	device *registry.Device
	prof   *profile.Profile
	remote string
	keyFP  string // fingerprint of the key the device authenticated with
	certCA string // fingerprint of the CA whose certificate it presented, if it did
	offer  string // the hash of what its client offered (recordOffer), "" if unknown
	log    *slog.Logger
	// requestsServed, for a gateway, is closed once the goroutine serving its global
	// requests is done; nil for other devices (their requests are served by run).
	requestsServed chan struct{}
	// relayRefused: devices whose relayed notifications this gateway session was
	// refused, counted as a violation once each (the goroutine serving requests alone).
	relayRefused map[string]bool

	conn     *ssh.ServerConn              // nil while pending
	tcp      net.Conn                     // the connection under conn, set before run
	ready    chan struct{}                // closed once conn is set
	channels atomic.Int32                 // open channels, both directions
	rejected atomic.Int32                 // refused channel opens (bounded: CVE-2026-39827)
	mux      atomic.Pointer[zmux.Session] // the device's multiplexed channel, if it opened one
	// muxRequests are the multiplexed channel's requests (the protocol has none), set
	// by openMux for run's loop, which refuses them; only run's goroutine touches it.
	muxRequests <-chan *ssh.Request
	algos       registry.Algorithms // as recorded; touched only by run's goroutine
	// shown and opened are what Sessions reports of the session; guarded by srv.mu.
	shown  registry.Algorithms
	opened time.Time

	closeOnce sync.Once
	done      chan struct{}
	// forwards held by this session; guarded by srv.mu.
	forwards forwardSet

	// gw is, for a device behind a gateway, the gateway's session that carries it: the
	// device has no connection of its own here (conn stays nil).
	gw *session
	// children are, for a gateway's session, the devices it announced; guarded by srv.mu.
	children map[string]*session

	// announceMu orders the announcements of the hub's host keys on this connection;
	// announced is the last set sent ("" for none): OpenSSH clients take one per
	// connection, iotsafe's take each new set.
	announceMu sync.Mutex
	announced  string
	// proofs are the host key proofs asked; proofsAllowed grows with each announcement.
	proofs, proofsAllowed atomic.Int32
	// keepaliveTimer is the pending keepalive; close stops it, so a closed session (its
	// connection and buffers, some 20 KiB) is not held until the timer would have fired.
	keepaliveTimer atomic.Pointer[time.Timer]
}

func newSession(s *Server, d *registry.Device, p *profile.Profile, remote string) *session {
	return &session{
		srv: s, device: d, prof: p, remote: remote,
		log:   s.log.With("device", d.Name, "remote", remote),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}
}

func (s *Server) state(name string) *deviceState {
	ds := s.devices[name]
	if ds == nil {
		ds = &deviceState{}
		s.devices[name] = ds
	}
	return ds
}

// reserve admits sess under the device's session limit. At the limit it probes the
// existing sessions; those that do not answer are closed (takeover). A live session at
// the limit makes the new one a violation.
func (s *Server) reserve(sess *session, key string) error {
	name := sess.device.Name
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("hub is shutting down")
	}
	ds := s.state(name)
	if len(ds.sessions) >= sess.prof.MaxSessions {
		others := append([]*session(nil), ds.sessions...)
		probe := s.cfg.TakeoverProbe
		s.mu.Unlock()
		s.takeOverStale(others, probe, sess.remote)
		s.mu.Lock()
		ds = s.state(name)
		if len(ds.sessions) >= sess.prof.MaxSessions {
			s.mu.Unlock()
			return fmt.Errorf("device %q already has %d live session(s), its profile %q allows %d", name, len(ds.sessions), sess.prof.Name, sess.prof.MaxSessions)
		}
	}
	ds.sessions.add(sess)
	s.pending[key] = sess
	s.mu.Unlock()
	return nil
}

// takeOverStale probes sessions in parallel and closes those that do not answer in time.
func (s *Server) takeOverStale(sessions []*session, timeout time.Duration, newRemote string) {
	var wg sync.WaitGroup
	for _, o := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !o.alive(timeout) {
				o.log.Info("taking over stale session", "new_remote", newRemote)
				s.event(registry.Event{Device: o.device.Name, Kind: registry.EventTakeover,
					Detail: fmt.Sprintf("session from %s did not answer within %s; replaced by %s", o.remote, timeout, newRemote), Remote: newRemote})
				o.close("taken over by a new session")
			}
		}()
	}
	wg.Wait()
}

// attach binds the finished handshake to its reserved session.
func (s *Server) attach(key string, conn *ssh.ServerConn) *session {
	s.mu.Lock()
	sess := s.pending[key]
	delete(s.pending, key)
	if sess != nil {
		sess.conn = conn // under mu: Close may be closing this session right now
	}
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	close(sess.ready)
	select {
	case <-sess.done: // closed (shutdown, revoke) while pending
		return nil
	default:
	}
	return sess
}

func (s *Server) releasePending(key string) {
	s.mu.Lock()
	sess := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if sess != nil {
		sess.close("handshake failed")
	}
}

// alive sends a keepalive and reports whether any answer came within timeout.
func (ss *session) alive(timeout time.Duration) bool {
	if ss.gw != nil {
		return ss.gw.alive(timeout) // a device behind a gateway lives as long as its gateway
	}
	select {
	case <-ss.ready:
	case <-ss.done:
		return false
	case <-time.After(timeout):
		return false // still handshaking after a whole probe: treat as stale
	}
	reply := make(chan struct{})
	go func() {
		// Stock clients answer unknown requests with failure: any answer proves life.
		if _, _, err := ss.conn.SendRequest("keepalive@openssh.com", true, nil); err == nil {
			close(reply)
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-reply:
		return true
	case <-t.C:
		return false
	case <-ss.done:
		return false
	}
}

// close ends the session, its forwards and its channels. Safe to call many times.
func (ss *session) close(why string) {
	ss.closeOnce.Do(func() {
		close(ss.done)
		if t := ss.keepaliveTimer.Load(); t != nil {
			t.Stop()
		}
		s := ss.srv
		s.mu.Lock()
		if ds := s.devices[ss.device.Name]; ds != nil {
			ds.sessions.remove(ss)
			ss.forwards.each(func(f *forward) { ds.forwards.del(f.alias, f) })
			if len(ds.sessions) == 0 && ds.forwards.len() == 0 {
				delete(s.devices, ss.device.Name)
			}
		}
		fwds := ss.forwards.all()
		ss.forwards = forwardSet{}
		conn := ss.conn
		children := ss.children
		ss.children = nil
		if gw := ss.gw; gw != nil && gw.children[ss.device.Name] == ss {
			delete(gw.children, ss.device.Name)
		}
		s.mu.Unlock()
		for _, f := range fwds {
			f.stop()
		}
		if conn != nil {
			conn.Close()
		}
		if len(children) > 0 {
			names := make([]string, 0, len(children))
			for name, c := range children {
				c.close("its gateway's session ended")
				names = append(names, name)
			}
			if s.shuttingDown() {
				s.childrenEnded(names, "hub shutting down") // before the process exits
			} else {
				s.afterSession(func() { s.childrenEnded(names, "gateway "+ss.device.Name+" gone") })
			}
		}
		if gw := ss.gw; gw != nil {
			select {
			case <-gw.done: // the gateway's close records its children's ends at once
			default:
				s.afterSession(func() { s.childrenEnded([]string{ss.device.Name}, ss.remote) })
			}
		}
		if len(fwds) > 0 {
			s.relayChanged(ss.device.Name)
		}
		ss.log.Info("session closed", "why", why)
	})
}

// open records the session's start and what it negotiated, for 'iotsafe device show'
// and the audit log.
func (ss *session) open() {
	ctx, cancel := context.WithTimeout(context.Background(), ss.srv.cfg.HandshakeTimeout)
	defer cancel()
	a := ss.algos
	detail := fmt.Sprintf("%s, %s, %s, key %s", a.Client, a.KeyExchange, a.Cipher, a.Key)
	if err := ss.srv.store.OpenSession(ctx, ss.device.Name, ss.remote, a, detail); err != nil {
		ss.log.Error("recording session failed", "err", err)
	}
}

// recordAlgorithms records what the session negotiated since it opened.
func (ss *session) recordAlgorithms() {
	ctx, cancel := context.WithTimeout(context.Background(), ss.srv.cfg.HandshakeTimeout)
	defer cancel()
	if err := ss.srv.store.RecordAlgorithms(ctx, ss.device.Name, ss.algos); err != nil {
		ss.log.Error("recording session failed", "err", err)
	}
}

// run serves an attached session until it ends.
//
// A panic while serving the session (a bug, maybe one a device can trigger) is
// contained: logged with its stack, counted, and only this connection is closed; the
// session's end is then recorded as for any other end.
func (ss *session) run(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	func() {
		defer contain.Recover(ss.log, "ssh session", contain.CloseFunc(func() error {
			ss.close("internal error (a panic: see the hub's log)")
			return ss.conn.Close()
		}))
		ss.serve(chans, reqs)
	}()
	ss.ended()
}

// serve opens the session and serves it until the connection ends.
func (ss *session) serve(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	s := ss.srv
	a := ss.conn.Conn.(ssh.AlgorithmsConnMetadata).Algorithms()
	algos := registry.Algorithms{
		KeyExchange: a.KeyExchange, HostKey: a.HostKey, Cipher: a.Read.Cipher, MAC: a.Read.MAC,
		KeyType: keyType(ss.conn.Permissions), Key: ss.keyFP, Client: string(ss.conn.ClientVersion()), Offer: ss.offer,
	}
	ss.algos = algos
	s.mu.Lock()
	ss.shown, ss.opened = algos, time.Now()
	s.mu.Unlock()
	ss.open()
	ss.log.Info("session open", "client", algos.Client, "kex", algos.KeyExchange, "cipher", algos.Cipher, "key", algos.Key)
	s.metrics.SessionOpened(ss.device.Name)
	if set := s.hostKeys.Load(); set != nil && set.Rotating() {
		s.afterSession(func() { ss.announceHostKeys(set) })
	}

	ss.keepalive()
	if ss.prof.Gateway != nil {
		// A gateway's requests write the registry and the telemetry store (relayed
		// notifications, device claims: milliseconds each). They are served in order by
		// a goroutine of their own, so that the channel opens of the devices behind the
		// gateway never wait for them. Gateways are few; devices keep one goroutine.
		requestsServed := make(chan struct{})
		ss.requestsServed = requestsServed
		go func(reqs <-chan *ssh.Request) {
			defer close(requestsServed)
			defer contain.Recover(ss.log, "ssh gateway requests", ss.conn)
			for req := range reqs {
				ss.serveRequest(req)
			}
		}(reqs)
		reqs = nil
	}
	// One goroutine serves the session's channel opens, its global requests and the
	// multiplexed channel's requests (no handler blocks on this connection), which saves
	// goroutines per device: they are most of an idle session's memory.
	var muxReqs <-chan *ssh.Request
	for chans != nil || reqs != nil {
		select {
		case nc, ok := <-chans:
			if !ok {
				chans = nil
				continue
			}
			if ss.spent() {
				nc.Reject(ssh.Prohibited, "iotsafe: connection closing")
				continue
			}
			ss.handleChannel(nc)
			if ss.muxRequests != nil {
				muxReqs, ss.muxRequests = ss.muxRequests, nil
			}
		case req, ok := <-muxReqs:
			if !ok {
				muxReqs = nil
			} else if req.WantReply {
				req.Reply(false, nil)
			}
		case req, ok := <-reqs:
			if !ok {
				reqs = nil
				continue
			}
			ss.serveRequest(req)
		}
	}
}

// ended records the end of the session once its connection is gone.
func (ss *session) ended() {
	s := ss.srv
	if ss.requestsServed != nil {
		<-ss.requestsServed // the connection ended: its requests channel is closed too
	}
	ss.close("connection ended")
	s.metrics.SessionClosed(ss.device.Name)
	if s.shuttingDown() {
		return // Close records every session's end in one transaction
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	if err := s.store.CloseSession(ctx, ss.device.Name, ss.remote); err != nil {
		ss.log.Error("recording session end failed", "err", err)
	}
}

// serveRequest answers one global request, unless the connection spent its refusal
// budget.
func (ss *session) serveRequest(req *ssh.Request) {
	if ss.spent() {
		if req.WantReply {
			req.Reply(false, nil)
		}
		return
	}
	ss.handleRequest(req)
}

func keyType(p *ssh.Permissions) string {
	if p == nil {
		return ""
	}
	return p.Extensions[extKeyType]
}

// keepalive drops the session when it stops answering. It runs from a timer, so an
// idle session holds no goroutine for it (each costs the hub at least 8 KiB of stack,
// and goroutines are most of an idle session's memory).
func (ss *session) keepalive() {
	ss.srv.mu.Lock()
	interval := ss.srv.cfg.KeepaliveInterval
	ss.srv.mu.Unlock()
	t := time.AfterFunc(interval, func() {
		select {
		case <-ss.done:
			return
		default:
		}
		ss.srv.mu.Lock()
		timeout := ss.srv.cfg.KeepaliveTimeout
		ss.srv.mu.Unlock()
		if !ss.alive(timeout) {
			select {
			case <-ss.done:
			default:
				ss.close(fmt.Sprintf("no keepalive answer for %s", timeout))
			}
			return
		}
		ss.keepalive()
	})
	ss.keepaliveTimer.Store(t)
	select {
	case <-ss.done: // closed meanwhile: close may have stopped the timer before
		t.Stop()
	default:
	}
}

// Kick closes every live session of a device (after a revoke or removal). It reports
// how many sessions it closed.
func (s *Server) Kick(device, why string) int { return s.KickKey(device, "", why) }

// KickKey closes the device's live sessions that authenticated with the key of that
// fingerprint ("" closes all of them), e.g. after that key alone was revoked.
func (s *Server) KickKey(device, fingerprint, why string) int {
	s.mu.Lock()
	if fingerprint == "" {
		delete(s.relayAdmitted, device) // looked up again at its next relayed batch
	}
	var victims []*session
	if ds := s.devices[device]; ds != nil {
		for _, ss := range ds.sessions {
			if fingerprint == "" || ss.keyFP == fingerprint {
				victims = append(victims, ss)
			}
		}
	}
	s.mu.Unlock()
	// Revoked or removed here: the gateway closes the device and keeps it out.
	return closeSessions(victims, why, (*session).tellGateway)
}

// KickCA closes the sessions that logged in with a certificate of the CA of that
// fingerprint (it is no longer trusted).
func (s *Server) KickCA(fingerprint, why string) int {
	s.mu.Lock()
	var victims []*session
	for _, ds := range s.devices {
		for _, ss := range ds.sessions {
			if ss.certCA == fingerprint {
				victims = append(victims, ss)
			}
		}
	}
	s.mu.Unlock()
	return closeSessions(victims, why, (*session).tellGateway)
}

// KickProfile closes the sessions that logged in with another version of the named
// profile than the registry holds now (an operator applied a new one to live
// sessions): each comes back under it. A device behind a gateway is closed here and its
// gateway asked to announce it again (not revoked). Sessions already under the current
// version are left alone, so the same change arriving again through the change feed
// closes nothing twice.
func (s *Server) KickProfile(name, why string) int {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	current, err := s.store.Profile(ctx, name)
	cancel()
	if err != nil {
		s.log.Error("applying a changed profile to live sessions: reading it failed", "profile", name, "err", err)
		return 0
	}
	s.mu.Lock()
	var named []*session
	for _, ds := range s.devices {
		for _, ss := range ds.sessions {
			if ss.prof != nil && ss.prof.Name == name {
				named = append(named, ss)
			}
		}
	}
	s.mu.Unlock()
	// Compared outside the lock, each loaded version once: a centre may hold 100,000
	// sessions of one profile.
	want := current.Marshal()
	same := map[*profile.Profile]bool{}
	var victims []*session
	for _, ss := range named {
		eq, seen := same[ss.prof]
		if !seen {
			eq = bytes.Equal(ss.prof.Marshal(), want)
			same[ss.prof] = eq
		}
		if !eq {
			victims = append(victims, ss)
		}
	}
	return closeSessions(victims, why, (*session).announceAgain)
}

// closeSessions closes each session and, for one behind a gateway, tells its gateway
// (gw is the gateway's session).
func closeSessions(victims []*session, why string, tell func(gw *session, device, why string)) int {
	for _, ss := range victims {
		ss.close(why)
		if ss.gw != nil {
			tell(ss.gw, ss.device.Name, why)
		}
	}
	return len(victims)
}

// Online reports whether a device has a live session.
func (s *Server) Online(device string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.devices[device]
	return ds != nil && len(ds.sessions) > 0
}

// SessionInfo is a live session of a device, as the operator console shows it.
type SessionInfo struct {
	Remote     string              `json:"remote"`
	Opened     time.Time           `json:"opened"`
	Algorithms registry.Algorithms `json:"algorithms"`
	CertCA     string              `json:"cert_ca,omitempty"` // the CA of the certificate it logged in with
	Forwards   []string            `json:"forwards"`          // the aliases it serves
	Gateway    string              `json:"gateway,omitempty"` // the gateway that carries it
}

// Sessions are the device's live sessions on this hub.
func (s *Server) Sessions(device string) []SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.devices[device]
	if ds == nil {
		return nil
	}
	out := make([]SessionInfo, 0, len(ds.sessions))
	for _, ss := range ds.sessions {
		info := SessionInfo{Remote: ss.remote, Opened: ss.opened, Algorithms: ss.shown, CertCA: ss.certCA, Forwards: []string{}}
		ss.forwards.each(func(f *forward) { info.Forwards = append(info.Forwards, f.alias) })
		if ss.gw != nil {
			info.Gateway = ss.gw.device.Name
		}
		out = append(out, info)
	}
	return out
}

// OnlineDevices lists the devices with a live session (from memory: reading the
// registry for it cost seconds at 100,000 devices).
func (s *Server) OnlineDevices() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.devices))
	for name, ds := range s.devices {
		if len(ds.sessions) > 0 {
			out[name] = true
		}
	}
	return out
}

// OnlineCount is how many devices have a live session.
func (s *Server) OnlineCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ds := range s.devices {
		if len(ds.sessions) > 0 {
			n++
		}
	}
	return n
}

// Load is what the server carries now: device sessions, forwarded connections open
// hub-wide, and the most the forward memory budget allows.
func (s *Server) Load() (sessions int, forwards, forwardLimit int64) {
	s.mu.Lock()
	for _, ds := range s.devices {
		sessions += len(ds.sessions)
	}
	s.mu.Unlock()
	return sessions, s.budget.open.Load(), s.budget.max
}

// Violation records a breach of device's profile that another path of the hub saw (the
// MQTT broker's refusals) and applies the profile's on_violation, as for the SSH
// session's own: counted, audited once a minute per detail, revoked past the limit.
func (s *Server) Violation(device, detail, remote string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	d, err := s.store.Device(ctx, device)
	if err != nil {
		s.log.Error("recording a violation: no such device", "device", device, "err", err)
		return
	}
	prof, err := s.store.Profile(ctx, d.Profile)
	if err != nil {
		s.log.Error("recording a violation: the device's profile", "device", device, "err", err)
		return
	}
	s.violation(d, prof, detail, remote)
}

// violation records a breach of the profile and applies the profile's policy.
func (s *Server) violation(d *registry.Device, prof *profile.Profile, detail, remote string) {
	s.metrics.Violation(d.Name)
	// Every violation counts (on_violation); the same one repeated within a minute is one
	// event and one log line, with how many it stands for.
	record, held := s.violGate.Allow(d.Name + "|" + detail)
	if record {
		if held > 0 {
			detail = fmt.Sprintf("%s (and %d more times since the last record)", detail, held)
		}
		s.log.Warn("profile violation", "device", d.Name, "detail", detail, "remote", remote)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	n, err := s.store.AddViolation(ctx, d.Name, detail, remote, record)
	if err != nil {
		s.log.Error("recording violation failed", "device", d.Name, "err", err)
		return
	}
	if prof.OnViolation.Action == profile.ActionRevoke && n >= prof.OnViolation.After {
		reason := fmt.Sprintf("automatic: %d violations (profile %s revokes after %d); last: %s", n, prof.Name, prof.OnViolation.After, detail)
		// In its own goroutine: violations are counted inside SSH handshakes and MQTT and
		// SOAP handlers, which the revocation's consequences close.
		go s.revoke(d.Name, reason)
	}
}

// revoke revokes a device through the change path: the registry, then every path.
func (s *Server) revoke(device, reason string) {
	if s.cfg.Revoker == nil {
		s.log.Error("automatic revoke impossible: the server has no change path (sshd.Config.Revoker)", "device", device)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // outlives a shutdown
	defer cancel()
	closed, err := s.cfg.Revoker.Revoke(ctx, device, reason)
	if err != nil {
		s.log.Error("automatic revoke failed", "device", device, "err", err)
		return
	}
	s.log.Warn("device revoked", "device", device, "reason", reason, "closed", closed)
}
