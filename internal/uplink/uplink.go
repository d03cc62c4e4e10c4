package uplink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/tunnel"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// After a working session to the centre was lost, for RecentWindow the uplink retries
// at most RecentMax apart (jittered over its second half) instead of backing off
// further: a centre restart is the usual cause, and a gateway's devices should be back
// within seconds of it. A gateway is one client among a few hundred, not a fleet.
const (
	RecentWindow = 5 * time.Minute
	RecentMax    = 2 * time.Second
)

// Local is what the uplink needs from the gateway's own SSH server.
type Local interface {
	Serving(device string) (sshd.Served, bool)
	ServingDevices() []string
	RelayTo(device, alias, originAddr string, originPort uint32, accept func() (tunnel.Stream, error)) error
}

// Config of the uplink. Hub, Name, Signer, HostKey and Local are required.
type Config struct {
	Hub     string // host:port of the centre's SSH server
	Name    string // the gateway's device name at the centre (its SSH user)
	Signer  ssh.Signer
	HostKey ssh.HostKeyCallback
	// HostKeys, if set, learns what the centre announces of its host keys during a
	// rotation (agent.PinFingerprint gives both this and HostKey).
	HostKeys agent.HostKeyLearner
	Local    Local
	// Revoked is called when the centre says a device is revoked or removed there: the
	// hub closes it and keeps it out (it revokes the device in its own registry).
	Revoked func(device, reason string)

	// KeepaliveInterval and KeepaliveTimeout: the centre is probed every interval and
	// the session dropped after timeout without an answer; 0 means 15s and 45s.
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay; 0 means 1s and 30s.
	BackoffMin, BackoffMax time.Duration
	// HandshakeTimeout bounds TCP connect plus SSH handshake, and then the opening of the
	// multiplexed channel; 0 means 15s.
	HandshakeTimeout time.Duration
	Logger           *slog.Logger
	// OnRetry, if set, is called each time a session attempt failed or a session ended,
	// with the delay before the next attempt.
	OnRetry func(err error, delay time.Duration)
	// OnSynced, if set, is called each time every device serving here has been
	// announced (tests wait for it).
	OnSynced func()

	// Telemetry, if set, is the gateway's notification store: on every session its
	// notifications are relayed to the centre's store (relay.go), each stored there
	// once. RelayDevice, if set, says whether a device's notifications go (false: it
	// is revoked here; its notifications stay here).
	Telemetry   Telemetry
	RelayDevice func(device string) bool
}

// Status is the uplink's state for 'iotsafe status'.
type Status struct {
	Hub        string `json:"hub"`
	State      string `json:"state"` // connected, connecting, waiting
	Announced  int    `json:"announced"`
	Refused    int    `json:"refused"`
	Reconnects int    `json:"reconnects"`
	LastError  string `json:"last_error,omitempty"`
	// Relay is the notification relay's state; nil without a store to relay.
	Relay *RelayStatus `json:"relay,omitempty"`
}

// Uplink keeps the gateway's session to the centre.
type Uplink struct {
	cfg Config
	log *slog.Logger

	wasUp atomic.Bool // the last session got past the handshake

	mu        sync.Mutex
	dirty     map[string]bool // devices whose announcement is out of date
	kick      chan struct{}   // signalled when dirty grows
	announced map[string]bool // devices the centre serves now (this session)
	refused   map[string]string
	state     string
	reconn    int
	lastErr   string

	relayStatus RelayStatus
}

// New validates cfg.
func New(cfg Config) (*Uplink, error) {
	if cfg.Hub == "" || cfg.Name == "" || cfg.Signer == nil || cfg.HostKey == nil || cfg.Local == nil {
		return nil, errors.New("uplink: hub, name, key, hub key and the local server are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.KeepaliveInterval, 15*time.Second)
	def(&cfg.KeepaliveTimeout, 3*cfg.KeepaliveInterval)
	def(&cfg.BackoffMin, time.Second)
	def(&cfg.BackoffMax, 30*time.Second)
	def(&cfg.HandshakeTimeout, 15*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Uplink{cfg: cfg, log: cfg.Logger.With("component", "uplink", "centre", cfg.Hub),
		dirty: map[string]bool{}, kick: make(chan struct{}, 1), announced: map[string]bool{},
		refused: map[string]string{}, state: "connecting", relayStatus: RelayStatus{State: "off"}}, nil
}

// Changed notes that what a device serves here changed (sshd.Config.Relay). It never
// blocks.
func (u *Uplink) Changed(device string) {
	u.mu.Lock()
	u.dirty[device] = true
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Status reports the uplink's state.
func (u *Uplink) Status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := Status{Hub: u.cfg.Hub, State: u.state, Announced: len(u.announced), Refused: len(u.refused),
		Reconnects: u.reconn, LastError: u.lastErr}
	if u.cfg.Telemetry != nil {
		r := u.relayStatus
		st.Relay = &r
	}
	return st
}

// Run keeps the session to the centre until ctx ends, reconnecting with backoff. It
// returns ctx's error, or an error the centre's answer cannot fix (its host key).
func (u *Uplink) Run(ctx context.Context) error {
	attempt := 0
	var lost time.Time // when the last working session ended
	for {
		start := time.Now()
		err := u.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, agent.ErrHostKey) {
			u.setState("stopped", err)
			u.log.Error("the centre's host key is not the pinned one; not retrying", "err", err)
			return err
		}
		if u.wasUp.Swap(false) {
			lost = time.Now()
		}
		if time.Since(start) > u.cfg.BackoffMax {
			attempt = 0
		}
		delay := agent.Backoff(attempt, u.cfg.BackoffMin, u.cfg.BackoffMax)
		if !lost.IsZero() && time.Since(lost) < RecentWindow && delay > RecentMax {
			// The centre was there a moment ago (a restart, most likely): try again soon, so
			// its devices are back within seconds of it rather than at the next doubling.
			delay = RecentMax/2 + rand.N(RecentMax/2+1)
		}
		attempt++
		u.setState("waiting", err)
		u.log.Warn("session to the centre ended; local devices stay connected; reconnecting", "err", err, "in", delay.Round(time.Millisecond).String())
		if u.cfg.OnRetry != nil {
			u.cfg.OnRetry(err, delay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		u.mu.Lock()
		u.reconn++
		u.state = "connecting"
		u.mu.Unlock()
	}
}

func (u *Uplink) setState(state string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.state = state
	if err != nil {
		u.lastErr = err.Error()
	}
}

// session runs one session to the centre until it fails.
func (u *Uplink) session(ctx context.Context) error {
	d := net.Dialer{Timeout: u.cfg.HandshakeTimeout, KeepAlive: -1}
	dial := func() (net.Conn, error) {
		tc, err := d.DialContext(ctx, "tcp", u.cfg.Hub)
		if err != nil {
			return nil, fmt.Errorf("uplink: connect: %w", err)
		}
		return tc, nil
	}
	tc, err := dial()
	if err != nil {
		return err
	}
	cc := &ssh.ClientConfig{
		User: u.cfg.Name,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(u.cfg.Signer)},
		BannerCallback: func(msg string) error {
			u.log.Warn("the centre says", "message", strings.TrimSpace(msg))
			return nil
		},
		ClientVersion: "SSH-2.0-iotsafe-gateway",
	}
	conn, chans, reqs, err := agent.Handshake(tc, dial, u.cfg.Hub, cc, u.cfg.HostKey, u.cfg.HandshakeTimeout)
	if err != nil {
		if errors.Is(err, agent.ErrHostKey) {
			return err
		}
		return fmt.Errorf("uplink: handshake: %w", err)
	}
	defer conn.Close()
	ended := sshext.Ended(conn)
	u.wasUp.Store(true)
	u.log.Info("connected to the centre")

	// A new session: the centre knows none of our devices; announce all of them.
	u.mu.Lock()
	u.announced, u.refused = map[string]bool{}, map[string]string{}
	u.state, u.lastErr = "connected", ""
	for _, name := range u.cfg.Local.ServingDevices() {
		u.dirty[name] = true
	}
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}

	done := make(chan struct{})
	defer close(done)
	go u.serveChannels(chans)
	go u.serveRequests(conn, reqs)
	setup := agent.StartSetupTimer(conn, u.cfg.HandshakeTimeout)
	m := u.openMux(conn, ended)
	if m != nil {
		defer m.Close()
	}
	if err := setup.Done(nil); err != nil {
		return fmt.Errorf("uplink: %w", err)
	}
	if m != nil {
		go u.serveMux(m)
	}
	go u.keepalive(conn, done)
	if u.cfg.Telemetry != nil {
		go u.relay(ctx, conn, ended)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ended:
			return fmt.Errorf("uplink: session closed: %w", conn.Wait())
		case <-u.kick:
			if err := u.sync(conn); err != nil {
				return err
			}
		}
	}
}

// sync announces or withdraws every device whose state changed since the last sync,
// up to MaxAnnounceBatch devices per announcement.
func (u *Uplink) sync(conn ssh.Conn) error {
	for {
		u.mu.Lock()
		var names []string
		for n := range u.dirty {
			names = append(names, n)
			delete(u.dirty, n)
			if len(names) == sshext.MaxAnnounceBatch {
				break
			}
		}
		u.mu.Unlock()
		if len(names) == 0 {
			if u.cfg.OnSynced != nil {
				u.cfg.OnSynced()
			}
			return nil
		}
		var batch []sshext.Announce
		for _, name := range names {
			sv, serving := u.cfg.Local.Serving(name)
			if serving {
				batch = append(batch, sshext.Announce{Device: name, Aliases: sv.Aliases, Key: sv.Key, Client: sv.Client, Cipher: sv.Cipher, Remote: sv.Remote})
				continue
			}
			u.mu.Lock()
			was := u.announced[name]
			delete(u.announced, name)
			delete(u.refused, name)
			u.mu.Unlock()
			if was {
				if _, _, err := conn.SendRequest(sshext.WithdrawRequest, false, ssh.Marshal(sshext.Withdraw{Device: name})); err != nil {
					return fmt.Errorf("uplink: withdraw %s: %w", name, err)
				}
			}
		}
		if len(batch) == 0 {
			continue
		}
		ok, body, err := conn.SendRequest(sshext.AnnounceRequest, true, sshext.MarshalAnnounces(batch))
		if err != nil {
			return fmt.Errorf("uplink: announce: %w", err)
		}
		replies, perr := sshext.ParseAnnounceReplies(body)
		if !ok || perr != nil || len(replies) != len(batch) {
			replies = make([]sshext.AnnounceReply, len(batch))
			for i := range replies {
				replies[i].Refused = "the centre does not take devices from this gateway (is its profile a gateway profile?)"
			}
		}
		for i, r := range replies {
			u.answered(batch[i].Device, r)
		}
	}
}

// answered applies the centre's answer about one announced device.
func (u *Uplink) answered(name string, r sshext.AnnounceReply) {
	u.mu.Lock()
	if r.Refused != "" {
		delete(u.announced, name)
		u.refused[name] = r.Refused
	} else {
		u.announced[name] = true
		delete(u.refused, name)
	}
	u.mu.Unlock()
	switch {
	case r.Revoked:
		u.log.Warn("the centre says the device is revoked; closing it here", "device", name, "why", r.Refused)
		u.revoked(name, r.Refused)
	case r.Refused != "":
		u.log.Warn("the centre refused a device; it stays connected here", "device", name, "why", r.Refused)
	case r.Why != "":
		u.log.Warn("the centre refused some of a device's aliases", "device", name, "served", r.Served, "why", r.Why)
	default:
		u.log.Debug("device announced", "device", name, "aliases", r.Served)
	}
}

func (u *Uplink) revoked(device, reason string) {
	if u.cfg.Revoked != nil {
		u.cfg.Revoked(device, reason)
	}
}

// serveChannels carries the centre's connections to devices.
func (u *Uplink) serveChannels(chans <-chan ssh.NewChannel) {
	for nc := range chans {
		if nc.ChannelType() != sshext.DeviceChannel {
			nc.Reject(ssh.UnknownChannelType, "a gateway takes device channels only")
			continue
		}
		var o sshext.DeviceOpen
		if err := ssh.Unmarshal(nc.ExtraData(), &o); err != nil {
			nc.Reject(ssh.ConnectionFailed, "malformed device channel")
			continue
		}
		go func() {
			err := u.cfg.Local.RelayTo(o.Device, o.Alias, o.OriginAddr, o.OriginPort, func() (tunnel.Stream, error) {
				ch, reqs, err := nc.Accept()
				if err != nil {
					return nil, err
				}
				go ssh.DiscardRequests(reqs)
				return ch, nil
			})
			if err != nil {
				u.refusedRelay(o.Device, o.Alias, err)
				nc.Reject(ssh.ConnectionFailed, "gateway: "+err.Error())
			}
		}()
	}
}

// openMux opens the session's multiplexed channel, on which the centre opens a stream
// per connection to a device instead of an SSH channel (no round trip, less work on
// both hubs). Without it (a centre that refuses it) device channels are used.
func (u *Uplink) openMux(conn ssh.Conn, ended <-chan struct{}) *zmux.Session {
	ch, reqs, err := sshext.OpenChannel(conn, ended, sshext.MuxChannel, ssh.Marshal(sshext.MuxOpen{Mode: sshext.MuxPlain + sshext.MuxV2}))
	if err != nil {
		select {
		case <-ended: // the session is gone (the setup timer, or the centre): no refusal
		default:
			u.log.Info("the centre does not multiplex; one SSH channel per connection", "err", err)
		}
		return nil
	}
	go ssh.DiscardRequests(reqs)
	return zmux.New(ch, zmux.Options{Device: true, Version2: true})
}

// serveMux carries the centre's relayed streams to the devices.
func (u *Uplink) serveMux(m *zmux.Session) {
	for {
		st, err := m.Accept()
		if err != nil {
			return
		}
		t := st.Target()
		device, alias, ok := strings.Cut(t.Host, "/")
		if t.Kind != zmux.Relayed || !ok {
			st.Reset("a gateway takes relayed streams only")
			continue
		}
		go func() {
			if err := u.cfg.Local.RelayTo(device, alias, t.OriginHost, t.OriginPort, func() (tunnel.Stream, error) { return st, nil }); err != nil {
				u.refusedRelay(device, alias, err)
				st.Reset("gateway: " + err.Error())
			}
		}()
	}
}

// refusedRelay logs a connection from the centre this gateway could not carry to its
// device (the device's session just ended, its channel limit): the centre's client
// gets a reset, and this line says why.
func (u *Uplink) refusedRelay(device, alias string, err error) {
	u.log.Info("a connection from the centre could not be relayed to its device", "device", device, "alias", alias, "err", err)
}

// serveRequests answers the centre's requests: a device closed there, and the
// announcement of its host keys.
func (u *Uplink) serveRequests(conn ssh.Conn, reqs <-chan *ssh.Request) {
	rest := make(chan *ssh.Request)
	defer close(rest)
	go agent.ServeHubRequests(conn, u.cfg.Hub, u.cfg.HostKeys, u.log, rest)
	for req := range reqs {
		if req.Type != sshext.CloseDeviceRequest {
			rest <- req // host key announcements, and the refusal of anything else
			continue
		}
		var c sshext.CloseDevice
		if ssh.Unmarshal(req.Payload, &c) == nil && c.Device != "" {
			if c.Revoked {
				u.log.Warn("the centre revoked a device; closing it here", "device", c.Device, "why", c.Reason)
				u.revoked(c.Device, "at the centre: "+c.Reason)
			} else {
				// Closed there without a revocation (its profile changed): announced
				// again, it comes back as the centre holds it now.
				u.log.Info("the centre closed a device; announcing it again", "device", c.Device, "why", c.Reason)
			}
			u.Changed(c.Device)
		}
		if req.WantReply {
			req.Reply(false, nil)
		}
	}
}

// keepalive drops the session when the centre stops answering.
func (u *Uplink) keepalive(conn ssh.Conn, done <-chan struct{}) {
	agent.KeepAlive(conn, done, u.cfg.KeepaliveInterval, u.cfg.KeepaliveTimeout, nil, func() {
		u.log.Warn("the centre stopped answering; dropping the session", "timeout", u.cfg.KeepaliveTimeout)
	})
}
