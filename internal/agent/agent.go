package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshwire"
	"github.com/iotsafe/iotsafe/internal/tunnel"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// Config of the agent. Hub, Device, Signer and HostKey are required.
type Config struct {
	// Hub is host:port of the hub's SSH server; several, comma-separated, are hubs of one
	// registry: the agent uses the first and moves to the next when a session fails or
	// ends, so a device reaches another hub when its own is gone.
	Hub    string
	Device string     // device name (the SSH user)
	Signer ssh.Signer // the device key
	// KeyFile, if set, is where Signer came from: it is re-read before a connection
	// attempt when it changed (key rotation without restarting the agent).
	KeyFile string
	HostKey ssh.HostKeyCallback
	// HostKeyAlgorithms, if set, are the only host key algorithms asked for
	// (CertHostKeyAlgorithms with a HostCA).
	HostKeyAlgorithms []string
	// Certificate, if set, is an OpenSSH certificate FILE of the device key: the agent
	// offers it first (read at each connection, so a renewed one is used), then the key.
	Certificate string
	// HostKeys, if set, learns what the hub announces of its host keys during a
	// rotation (PinFingerprint and KnownHosts give both this and HostKey).
	HostKeys HostKeyLearner
	Expose   []Expose
	Forward  []Forward

	// KeepaliveInterval between liveness checks of the hub; 0 means 15s.
	KeepaliveInterval time.Duration
	// KeepaliveTimeout after which the session is considered dead; 0 means 3 intervals.
	KeepaliveTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay (exponential, with full jitter);
	// 0 means 1s and 60s.
	BackoffMin, BackoffMax time.Duration
	// RecentWindow and RecentMax: for RecentWindow after a working session was lost (a
	// hub restart or outage), reconnect attempts come at most RecentMax apart (jittered
	// between half of it and all of it), so the fleet is back within seconds of the hub
	// without a herd; 0 means 5m and 5s.
	RecentWindow, RecentMax time.Duration
	// RevokedWait is how long the agent waits after the hub said the device's key is
	// revoked, unless the key file changes meanwhile; 0 means 1h.
	RevokedWait time.Duration
	// ConnectWait is how long a local connection to a direct forward waits for a session
	// while the agent is reconnecting; 0 means 10s.
	ConnectWait time.Duration
	// HandshakeTimeout bounds TCP connect plus SSH handshake, and then the session's
	// setup (multiplexing, exposes), each; 0 means 15s.
	HandshakeTimeout time.Duration
	// Coalesce lets TCP merge small SSH packets (Nagle's algorithm, on the session to the
	// hub), as OpenSSH does for sessions without a terminal: fewer, fuller frames on slow
	// radio links, at the cost of up to a round trip of latency for small writes. Off by
	// default (Go's TCP_NODELAY).
	Coalesce bool
	// Compress asks the hub to compress the session's forwarded connections with one
	// shared deflate context (see package zmux). The hub agrees only if the device's
	// profile allows compression; otherwise the agent goes on uncompressed. Off by
	// default: compression can leak secrets that share a context with attacker-chosen
	// data (CRIME-like attacks; docs/security-model.md).
	Compress bool
	// ChannelPerConnection opens one SSH channel per forwarded connection, as stock
	// clients do, instead of carrying every connection of the session in one
	// multiplexed channel (see package zmux), the default: there a connection opens
	// without a round trip and ends without close messages (fewer packets on slow
	// links), and the hub spends about half the CPU per connection. A hub that does not
	// know the multiplexed channel gets plain channels anyway. With Compress set, the
	// multiplexed channel is still used when compression is granted.
	ChannelPerConnection bool
	// Logger; nil discards.
	Logger *slog.Logger
	// Sandbox, if set, is installed before the first connection and removed when Run
	// returns: it confines the device application (paper fig. 8, a).
	Sandbox Sandbox
	// OnStarted, if set, is called once the sandbox is on and the direct forwards
	// listen, before the first connection attempt: from then on the device application
	// may start (the service manager's readiness).
	OnStarted func()
	// OnReady, if set, is called each time a session is up with all reverse forwards
	// registered, with the hub's address (tests and the demo use it as a readiness
	// signal).
	OnReady func(hub string)
	// OnRetry, if set, is called each time a session attempt failed or a session ended,
	// with the delay before the next attempt (the outage lab counts attempts with it).
	OnRetry func(err error, delay time.Duration)
}

func (c *Config) applyDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.KeepaliveInterval, 15*time.Second)
	def(&c.KeepaliveTimeout, 3*c.KeepaliveInterval)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, time.Minute)
	def(&c.RecentWindow, 5*time.Minute)
	def(&c.RecentMax, DefaultRecentMax)
	def(&c.RevokedWait, time.Hour)
	def(&c.ConnectWait, 10*time.Second)
	def(&c.HandshakeTimeout, 15*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// DefaultRecentMax is Config.RecentMax's default.
const DefaultRecentMax = 5 * time.Second

// Sandbox confines the device application's network access while the agent runs.
type Sandbox interface {
	Install() error
	Remove() error
	String() string
}

// ErrHostKey means the hub presented a key the agent does not trust; the agent does not
// retry, since retrying cannot fix it.
var ErrHostKey = errors.New("agent: hub host key not trusted")

// ErrSetupTimeout means the hub completed the handshake but did not answer the
// session's setup in time; the agent reconnects.
var ErrSetupTimeout = errors.New("the hub accepted the session but did not answer its setup in time")

// ErrRevoked means the hub refused the device because its key is revoked.
var ErrRevoked = errors.New("agent: the hub says the device's key is revoked")

// Agent keeps the device's session to the hub.
type Agent struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	conn    ssh.Conn        // current session, nil while disconnected
	mux     *zmux.Session   // its multiplexed channel, nil if not negotiated
	ended   <-chan struct{} // closed once conn has ended (sshext.OpenChannel)
	up      chan struct{}   // closed when conn becomes non-nil
	exposed map[string]Expose
	key     *keySource  // used by Run's goroutine only
	hubs    []string    // cfg.Hub's addresses
	hub     int         // the one tried next; Run's goroutine only
	wasUp   atomic.Bool // the last session got past the handshake
	// born and beat (since born, on the monotonic clock: a device's clock may jump at
	// its first NTP sync) time the agent's last progress, for Alive.
	born time.Time
	beat atomic.Int64
}

// New validates cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.Hub == "" || cfg.Device == "" || cfg.Signer == nil || cfg.HostKey == nil {
		return nil, errors.New("agent: hub, device, key and hub key pinning are required")
	}
	if len(cfg.Expose) == 0 && len(cfg.Forward) == 0 {
		return nil, errors.New("agent: nothing to do: give at least one --expose or --forward")
	}
	cfg.applyDefaults()
	a := &Agent{cfg: cfg, log: cfg.Logger.With("device", cfg.Device), up: make(chan struct{}), exposed: map[string]Expose{}, born: time.Now()}
	for _, h := range strings.Split(cfg.Hub, ",") {
		if h = strings.TrimSpace(h); h != "" {
			a.hubs = append(a.hubs, h)
		}
	}
	if len(a.hubs) == 0 {
		return nil, errors.New("agent: no hub address")
	}
	a.key = newKeySource(cfg.KeyFile, cfg.Signer, a.log)
	for _, e := range cfg.Expose {
		if _, dup := a.exposed[e.Alias]; dup {
			return nil, fmt.Errorf("agent: alias %q exposed twice", e.Alias)
		}
		a.exposed[e.Alias] = e
	}
	return a, nil
}

// Run keeps the session up until ctx ends. It returns ctx's error, a listen error for a
// direct forward, or ErrHostKey.
func (a *Agent) Run(ctx context.Context) error {
	if sb := a.cfg.Sandbox; sb != nil {
		if err := sb.Install(); err != nil {
			return fmt.Errorf("agent: sandbox: %w", err)
		}
		a.log.Info("sandbox on", "sandbox", sb.String())
		defer func() {
			if err := sb.Remove(); err != nil {
				a.log.Error("removing the sandbox failed", "err", err)
			} else {
				a.log.Info("sandbox removed")
			}
		}()
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, f := range a.cfg.Forward {
		ln, err := net.Listen("tcp", f.Listen)
		if err != nil {
			return fmt.Errorf("agent: --forward %s=%s: %w", f.Listen, f.Alias, err)
		}
		lns = append(lns, ln)
		go a.acceptDirect(ctx, ln, f)
	}
	if a.cfg.OnStarted != nil {
		a.cfg.OnStarted()
	}
	attempt := 0
	var lost time.Time // when the last working session ended
	for {
		a.progress()
		start := time.Now()
		err := a.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrHostKey) {
			return err
		}
		if errors.Is(err, ErrRevoked) {
			a.log.Error("the hub says this device's key is revoked; waiting for a new key file or the retry time",
				"event", "key_revoked", "retry_in", a.cfg.RevokedWait.String())
			if err := a.waitRevoked(ctx); err != nil {
				return err
			}
			attempt = 0
			continue
		}
		if a.wasUp.Swap(false) {
			lost = time.Now()
		}
		if time.Since(start) > a.cfg.BackoffMax {
			attempt = 0 // the session was healthy for a while: start over
		}
		delay := a.reconnectDelay(attempt, lost)
		attempt++
		from := a.hubs[a.hub]
		a.hub = (a.hub + 1) % len(a.hubs) // the next hub of the list, if there are several
		a.log.Warn("session ended; reconnecting", "err", err, "hub", from, "next", a.hubs[a.hub], "in", delay.Round(time.Millisecond).String())
		if a.cfg.OnRetry != nil {
			a.cfg.OnRetry(err, delay)
		}
		if err := a.wait(ctx, delay); err != nil {
			return err
		}
	}
}

// progressTick is how often a wait of the agent shows progress.
const progressTick = 10 * time.Second

// wait sleeps d, or until ctx ends, showing progress every progressTick meanwhile.
func (a *Agent) wait(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(left, progressTick)):
			a.progress()
		}
	}
}

// progress records that the agent moved on: a connection attempt, a wait's tick, a
// keepalive answered.
func (a *Agent) progress() { a.beat.Store(int64(time.Since(a.born))) }

// Alive returns an error when the agent has shown no progress for longer than its
// slowest legitimate step takes twice (a keepalive's interval and timeout; a
// connection's handshakes, one per host key type the pin refuses, and its setup; a
// backoff's wait): only a bug can cause that, and a service
// manager's watchdog restarts an agent that is not alive. It also takes the agent's
// lock, so with that lock deadlocked it never returns, which the watchdog sees too.
func (a *Agent) Alive() error {
	a.mu.Lock()
	connected := a.conn != nil
	a.mu.Unlock()
	silent := time.Since(a.born) - time.Duration(a.beat.Load())
	if limit := a.aliveLimit(); silent > limit {
		return fmt.Errorf("agent: no progress for %s (more than %s; session up: %v): no connection attempt, wait or keepalive answer",
			silent.Round(time.Second), limit, connected)
	}
	return nil
}

func (a *Agent) aliveLimit() time.Duration {
	c := a.cfg
	return 2 * max(c.KeepaliveInterval+c.KeepaliveTimeout, 4*c.HandshakeTimeout, c.BackoffMax, progressTick)
}

// reconnectDelay is the exponential backoff, kept short for a while after a working
// session was lost: the hub is likely back soon, and a device should be too.
func (a *Agent) reconnectDelay(attempt int, lost time.Time) time.Duration {
	d := Backoff(attempt, a.cfg.BackoffMin, a.cfg.BackoffMax)
	if !lost.IsZero() && time.Since(lost) < a.cfg.RecentWindow && d > a.cfg.RecentMax {
		half := a.cfg.RecentMax / 2
		d = half + rand.N(a.cfg.RecentMax-half+1)
	}
	return d
}

// waitRevoked waits RevokedWait, or until the key file changes (a new key installed).
func (a *Agent) waitRevoked(ctx context.Context) error {
	deadline := time.Now().Add(a.cfg.RevokedWait)
	tick := time.NewTicker(a.cfg.BackoffMax)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			a.progress()
			if a.key.changed() {
				a.log.Info("the key file changed; trying it")
				return nil
			}
		}
	}
	return nil
}

// Backoff is exponential with full jitter: uniform in [min, min*2^attempt] capped at max.
func Backoff(attempt int, lo, hi time.Duration) time.Duration {
	ceil := lo << min(attempt, 20)
	if ceil > hi || ceil <= 0 {
		ceil = hi
	}
	return lo + rand.N(ceil-lo+1)
}

// session runs one SSH session until it fails.
func (a *Agent) session(ctx context.Context) error {
	d := net.Dialer{Timeout: a.cfg.HandshakeTimeout, KeepAlive: a.cfg.KeepaliveInterval}
	hub := a.hubs[a.hub]
	dial := func() (net.Conn, error) {
		tc, err := d.DialContext(ctx, "tcp", hub)
		if err != nil {
			return nil, fmt.Errorf("agent: connect: %w", err)
		}
		if t, ok := tc.(*net.TCPConn); ok && a.cfg.Coalesce {
			t.SetNoDelay(false)
		}
		return tc, nil
	}
	tc, err := dial()
	if err != nil {
		return err
	}
	revoked := false // the hub's banner said so (iotsafe hubs do)
	cc := &ssh.ClientConfig{
		User:              a.cfg.Device,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(a.signers()...)},
		HostKeyAlgorithms: a.cfg.HostKeyAlgorithms,
		BannerCallback: func(msg string) error {
			a.log.Warn("hub says", "message", msg)
			if strings.Contains(msg, "is revoked") {
				revoked = true
			}
			return nil
		},
		ClientVersion: "SSH-2.0-iotsafe-agent",
	}
	conn, chans, reqs, err := Handshake(tc, dial, hub, cc, a.cfg.HostKey, a.cfg.HandshakeTimeout)
	if err != nil {
		if errors.Is(err, ErrHostKey) {
			return err
		}
		if revoked {
			return fmt.Errorf("%w: %v", ErrRevoked, err)
		}
		return fmt.Errorf("agent: handshake: %w", err)
	}
	a.wasUp.Store(true)
	defer conn.Close()
	ended := sshext.Ended(conn)
	go ServeHubRequests(conn, hub, a.cfg.HostKeys, a.log, reqs)
	done := make(chan struct{})
	defer close(done)
	go a.serveForwarded(chans)
	if a.cfg.Coalesce {
		// Ask the hub to coalesce its side too (an iotsafe hub does; others ignore it).
		conn.SendRequest(sshext.CoalesceRequest, false, nil)
	}
	setup := StartSetupTimer(conn, a.cfg.HandshakeTimeout)
	mux := a.negotiateMux(conn, ended)
	if mux != nil {
		defer mux.Close()
	}

	for _, e := range a.cfg.Expose {
		// Port 0: the alias names the service; the hub reports the protected socket's port.
		ok, _, err := conn.SendRequest("tcpip-forward", true, ssh.Marshal(sshwire.ForwardRequest{Addr: e.Alias}))
		if err != nil {
			return fmt.Errorf("agent: expose %s: %w", e.Alias, setup.Done(err))
		}
		if !ok {
			// The hub logged why; keep the session for the other forwards.
			a.log.Error("hub refused to expose alias; the reason is in the hub's log and 'iotsafe events --device NAME'", "alias", e.Alias)
			continue
		}
		a.log.Info("exposed", "alias", e.Alias, "target", e.Target)
	}
	if err := setup.Done(nil); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.setConn(conn, mux, ended)
	defer a.setConn(nil, nil, nil)
	a.log.Info("session up", "hub", hub)
	if a.cfg.OnReady != nil {
		a.cfg.OnReady(hub)
	}

	go a.keepalive(conn, done)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ended:
		return fmt.Errorf("agent: session closed: %w", conn.Wait())
	}
}

// Handshake runs the SSH client handshake on tc within timeout, trusting only the host
// keys hostKey accepts: a refused one comes back as ErrHostKey (retrying cannot fix it).
// tc is closed on failure. The agent, a gateway's uplink and peer hubs use it.
//
// A hub may hold keys of several types (ssh.host_key_algorithms), and the client's order
// picks the one it shows: with redial set, a key of a type the trust refuses makes
// Handshake connect again without that type's algorithms, until a type is trusted or
// none is left. A hub that adds a key type, or rotates to one (iotsafe hostkey), thus
// keeps the devices pinned to the type they know. Ed25519 comes first, then ECDSA, then
// RSA with SHA-2, unless cc names its own algorithms.
func Handshake(tc net.Conn, redial func() (net.Conn, error), addr string, cc *ssh.ClientConfig, hostKey ssh.HostKeyCallback, timeout time.Duration) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	algos := cc.HostKeyAlgorithms
	if len(algos) == 0 {
		algos = hostKeyPreference
	}
	var refused error // the first untrusted key shown
	for {
		c := *cc
		c.HostKeyAlgorithms = algos
		conn, chans, reqs, offered, err := handshakeOnce(tc, addr, &c, hostKey, timeout)
		var noCommon *ssh.AlgorithmNegotiationError
		switch {
		case err == nil:
			return conn, chans, reqs, nil
		case refused != nil && errors.As(err, &noCommon):
			return nil, nil, nil, refused // the hub has no other type of key: none is trusted
		case offered == nil || redial == nil:
			return nil, nil, nil, err
		}
		if refused == nil {
			refused = err
		}
		rest := slices.DeleteFunc(slices.Clone(algos), func(a string) bool { return algorithmKeyType(a) == offered.Type() })
		if len(rest) == 0 || len(rest) == len(algos) {
			return nil, nil, nil, refused
		}
		algos = rest
		if tc, err = redial(); err != nil {
			return nil, nil, nil, err
		}
	}
}

// hostKeyPreference is the agent's host key algorithms, strongest and smallest first;
// ssh-rsa (SHA-1) is left out.
var hostKeyPreference = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}

// algorithmKeyType is the type of key a host key algorithm signs with.
func algorithmKeyType(algo string) string {
	if algo == ssh.KeyAlgoRSASHA256 || algo == ssh.KeyAlgoRSASHA512 {
		return ssh.KeyAlgoRSA
	}
	return algo
}

// handshakeOnce is one handshake on tc; offered is the host key the hub showed when the
// trust refused it.
func handshakeOnce(tc net.Conn, addr string, cc *ssh.ClientConfig, hostKey ssh.HostKeyCallback, timeout time.Duration) (conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, offered ssh.PublicKey, err error) {
	var hostKeyErr error
	cc.HostKeyCallback = func(host string, remote net.Addr, key ssh.PublicKey) error {
		if err := hostKey(host, remote, key); err != nil {
			hostKeyErr = fmt.Errorf("%w: %s offered %s: %v", ErrHostKey, host, ssh.FingerprintSHA256(key), err)
			offered = key
			return hostKeyErr
		}
		return nil
	}
	cc.Timeout = timeout
	tc.SetDeadline(time.Now().Add(timeout))
	conn, chans, reqs, err = ssh.NewClientConn(tc, addr, cc)
	if err != nil {
		tc.Close()
		if hostKeyErr != nil {
			return nil, nil, nil, offered, hostKeyErr
		}
		return nil, nil, nil, nil, err
	}
	tc.SetDeadline(time.Time{})
	return conn, chans, reqs, nil, nil
}

// SetupTimer closes a session whose setup (the requests and channel opens after the
// handshake) has not finished within its timeout. A hub that completed the handshake
// but never answers would otherwise hold the device forever: the keepalive starts only
// after the setup, and a hub answers keepalives even while a channel open waits. The
// agent and a gateway's uplink use it.
type SetupTimer struct {
	t       *time.Timer
	timeout time.Duration
}

// StartSetupTimer starts the timer for conn's setup.
func StartSetupTimer(conn ssh.Conn, timeout time.Duration) *SetupTimer {
	return &SetupTimer{t: time.AfterFunc(timeout, func() { conn.Close() }), timeout: timeout}
}

// Done stops the timer, once the setup is over. If the timer had already closed the
// session, it returns ErrSetupTimeout (err, if any, is only a consequence of that);
// otherwise err.
func (s *SetupTimer) Done(err error) error {
	if !s.t.Stop() {
		return fmt.Errorf("%w (%s)", ErrSetupTimeout, s.timeout)
	}
	return err
}

func (a *Agent) keepalive(conn ssh.Conn, done <-chan struct{}) {
	KeepAlive(conn, done, a.cfg.KeepaliveInterval, a.cfg.KeepaliveTimeout, a.progress, func() {
		a.log.Warn("hub did not answer keepalive; reconnecting", "timeout", a.cfg.KeepaliveTimeout.String())
	})
}

// KeepAlive asks the server every interval whether it is alive (any answer will do),
// calling answered (if set) for each answer, and closes conn when no answer came within
// timeout, after calling dead. It returns then, or when done is closed. The agent and a
// gateway's uplink use it.
func KeepAlive(conn ssh.Conn, done <-chan struct{}, interval, timeout time.Duration, answered, dead func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		answer := make(chan struct{})
		go func() {
			if _, _, err := conn.SendRequest("keepalive@openssh.com", true, nil); err == nil {
				close(answer)
			}
		}()
		select {
		case <-answer:
			if answered != nil {
				answered()
			}
		case <-done:
			return
		case <-time.After(timeout):
			dead()
			conn.Close()
			return
		}
	}
}

// negotiateMux opens the multiplexed channel, compressed if asked (and, if the hub
// declines compression, plain unless ChannelPerConnection is set). Before any reverse
// forward is registered, so the hub's connections to exposed aliases use it from the
// first one. A refusal leaves the session with plain channels.
func (a *Agent) negotiateMux(conn ssh.Conn, ended <-chan struct{}) *zmux.Session {
	var modes []string
	if a.cfg.Compress {
		modes = append(modes, sshext.MuxDeflate)
	}
	if !a.cfg.ChannelPerConnection {
		modes = append(modes, sshext.MuxPlain)
	}
	for _, mode := range modes {
		// Version 2 first; a hub that predates it refuses the mode as unknown.
		v2 := true
		ch, reqs, err := sshext.OpenChannel(conn, ended, sshext.MuxChannel, ssh.Marshal(sshext.MuxOpen{Mode: mode + sshext.MuxV2, Coalesce: a.cfg.Coalesce}))
		if oe := (*ssh.OpenChannelError)(nil); errors.As(err, &oe) && oe.Reason == ssh.UnknownChannelType {
			v2 = false
			ch, reqs, err = sshext.OpenChannel(conn, ended, sshext.MuxChannel, ssh.Marshal(sshext.MuxOpen{Mode: mode, Coalesce: a.cfg.Coalesce}))
		}
		if err != nil {
			select {
			case <-ended: // the session is gone (the setup timer, or the hub): no refusal
				return nil
			default:
			}
			if mode == sshext.MuxDeflate {
				a.log.Warn("hub declined compression; going on without it", "reason", err)
			} else {
				a.log.Info("hub does not multiplex; one channel per connection", "reason", err)
			}
			continue
		}
		go ssh.DiscardRequests(reqs)
		// Streams are served on the channel's reader and its end handled there: no
		// goroutine waits on the session.
		o := zmux.Options{Device: true, Compress: mode == sshext.MuxDeflate, Version2: v2,
			Handle: a.serveStream, Ended: func(m *zmux.Session) { a.muxEnded(m, conn) }}
		if a.cfg.Coalesce {
			o.FlushDelay = sshext.CoalesceDelay
		}
		m := zmux.New(ch, o)
		if mode == sshext.MuxDeflate {
			a.log.Info("compression on", "level", zmux.Level, "framing", o.FramingVersion())
		} else {
			a.log.Info("multiplexing on", "framing", o.FramingVersion())
		}
		return m
	}
	return nil
}

// serveStream connects a stream the hub opens in the multiplexed channel to the exposed
// service (the dial on a goroutine of its own: it runs on the channel's reader).
func (a *Agent) serveStream(st *zmux.Stream) {
	t := st.Target()
	e, ok := a.exposed[t.Host]
	if t.Kind != zmux.Forwarded || !ok {
		st.Reset("alias not exposed by this agent")
		return
	}
	go func() {
		c, err := a.dialExposed(e)
		if err != nil {
			st.Reset("device service unreachable: " + err.Error())
			return
		}
		tunnel.Pipe(st, c, nil)
	}()
}

// muxEnded runs when the multiplexed channel has ended. If it broke, the session is
// dropped and comes back negotiated afresh rather than limping on with half its
// connections gone.
func (a *Agent) muxEnded(m *zmux.Session, conn ssh.Conn) {
	switch err := m.Err(); {
	case err == zmux.ErrClosed: // the session is ending anyway
	case errors.Is(err, zmux.ErrProtocol):
		a.log.Warn("multiplexed channel broken; reconnecting", "err", err)
		conn.Close()
	default: // the hub closed it, most likely with the whole session
		a.log.Debug("multiplexed channel ended", "err", err)
		conn.Close()
	}
}

func (a *Agent) dialExposed(e Expose) (net.Conn, error) {
	d := net.Dialer{Timeout: a.cfg.HandshakeTimeout}
	if host, _, _ := net.SplitHostPort(e.Target); host == "localhost" || net.ParseIP(host).IsLoopback() {
		d.KeepAlive = -1 // a service on the device itself: TCP keepalive would only cost system calls
	}
	c, err := d.Dial("tcp", e.Target)
	if err != nil {
		a.log.Warn("exposed service unreachable", "alias", e.Alias, "target", e.Target, "err", err)
	}
	return c, err
}

func (a *Agent) setConn(c ssh.Conn, m *zmux.Session, ended <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.conn, a.mux, a.ended = c, m, ended
	if c != nil {
		close(a.up)
	} else {
		a.up = make(chan struct{})
	}
}

// current returns the live session, its multiplexed channel (nil if none) and the
// channel closed at its end, waiting up to ConnectWait for a session.
func (a *Agent) current(ctx context.Context) (ssh.Conn, *zmux.Session, <-chan struct{}) {
	a.mu.Lock()
	c, m, ended, up := a.conn, a.mux, a.ended, a.up
	a.mu.Unlock()
	if c != nil {
		return c, m, ended
	}
	select {
	case <-up:
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.conn, a.mux, a.ended
	case <-ctx.Done():
	case <-time.After(a.cfg.ConnectWait):
	}
	return nil, nil, nil
}

// serveForwarded connects each forwarded-tcpip channel from the hub to the exposed service.
func (a *Agent) serveForwarded(chans <-chan ssh.NewChannel) {
	for nc := range chans {
		if nc.ChannelType() != "forwarded-tcpip" {
			nc.Reject(ssh.UnknownChannelType, "not accepted by the device agent")
			continue
		}
		var p sshwire.ForwardedTCPIP
		if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
			nc.Reject(ssh.ConnectionFailed, "malformed forwarded-tcpip")
			continue
		}
		e, ok := a.exposed[p.Addr]
		if !ok {
			nc.Reject(ssh.Prohibited, "alias not exposed by this agent")
			continue
		}
		go func() {
			c, err := a.dialExposed(e)
			if err != nil {
				nc.Reject(ssh.ConnectionFailed, "device service unreachable: "+err.Error())
				return
			}
			ch, reqs, err := nc.Accept()
			if err != nil {
				c.Close()
				return
			}
			go ssh.DiscardRequests(reqs)
			tunnel.Pipe(ch, c, nil)
		}()
	}
}

func (a *Agent) acceptDirect(ctx context.Context, ln net.Listener, f Forward) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			conn, mux, ended := a.current(ctx)
			if conn == nil {
				a.log.Warn("no session to the hub; dropping local connection", "alias", f.Alias)
				c.Close()
				return
			}
			host, portS, _ := net.SplitHostPort(c.RemoteAddr().String())
			oport, _ := strconv.Atoi(portS)
			_, lportS, _ := net.SplitHostPort(f.Listen)
			lport, _ := strconv.Atoi(lportS)
			if mux != nil {
				// Not confirmed: the request goes out with the open; a refusal resets the
				// stream and closes c.
				st, err := mux.Open(zmux.Target{Kind: zmux.Direct, Host: f.Alias, Port: uint32(lport), OriginHost: host, OriginPort: uint32(oport)})
				if err == nil {
					tunnel.Pipe(st, c, nil)
					return
				}
			}
			ch, reqs, err := sshext.OpenChannel(conn, ended, "direct-tcpip", ssh.Marshal(sshwire.DirectTCPIP{Host: f.Alias, Port: uint32(lport), OriginAddr: host, OriginPort: uint32(oport)}))
			if err != nil {
				a.log.Warn("hub refused direct forward", "alias", f.Alias, "err", err)
				c.Close()
				return
			}
			go ssh.DiscardRequests(reqs)
			tunnel.Pipe(ch, c, nil)
		}()
	}
}
