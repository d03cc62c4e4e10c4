package hub

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/console"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/deviceplain"
	"github.com/iotsafe/iotsafe/internal/frontdoor"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/logging"
	"github.com/iotsafe/iotsafe/internal/metrics"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/peerlink"
	"github.com/iotsafe/iotsafe/internal/regguard"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/uplink"
)

// Hub is one running host server: a list of components (components.go) started in
// order on one registry and closed in reverse.
type Hub struct {
	cfg     Config
	dir     string
	log     *slog.Logger
	level   *slog.LevelVar
	parts   []component
	started int // parts whose start ran (the last one may have failed)
	reg     *registry.Registry
	guard   *regguard.Guard // reg as live subsystems use it: holds revocations, violations and audit events when reg cannot write
	ssh     *sshd.Server
	// services are the hub's own device listeners that sshd hands devices' direct
	// forwards to in process, with the session's identity (REST and SOAP, MQTT).
	services   deviceconn.Services
	admin      *admin.Server
	metrics    *metrics.Metrics
	hostKeys   []ssh.Signer
	hostKeySet atomic.Pointer[hostkey.Set] // signing, next and retired keys, as loaded (rotation: internal/hostkey)
	sshAddr    net.Addr
	resolver   *resolver.Server
	front      *frontdoor.Server
	console    *console.Console // the operator console on the front door; nil when off
	frontAt    net.Addr
	// accounts are the front door's people and platform apps (REST, MQTT); nil without
	// the front door.
	accounts  *authn.Accounts
	metricsAt net.Addr
	// access enforces the grants: the kernel's rules, the user-space check of every
	// local connection, and the denied log; sshd, the resolver and the front door use it.
	access   *access.Enforcer
	ids      *access.Identities
	cancel   context.CancelFunc
	closeOne sync.Once
	dataLock *DataLock
	// lease is the hub's hold of a PostgreSQL registry (registry.LockServing).
	lease *registry.Lease
	// peers are the links to the other hubs of a shared registry (peers.go); nil
	// unless they share one and this hub has shared listeners.
	peers        *peerlink.Links
	liveCache    atomic.Pointer[liveHubs]
	portsChanged chan struct{} // holdPorts reads the registry's ports again
	// control is the one path of every change: the registry, then sshd, the telemetry
	// paths and the policy (changes.go).
	control     *control.Control
	changesFrom int64            // the audit event the change feed follows from (read before the first policy)
	relayMisses missCache        // addresses no live peer serves, for a second (peers.go)
	recorded    bool             // hub_started was recorded: Close records hub_stopped
	store       *telemetry.Store // nil without a telemetry path
	api         *restapi.API
	devices     *devicedir.Directory              // device identities of the telemetry paths; nil without one
	plain       *deviceplain.Server               // the plain device listener (rest.listen); nil when off
	transports  transports                        // the device transports (transports.go)
	mqtt        atomic.Pointer[mqttbroker.Broker] // the MQTT transport, for its admin commands; nil when off
	uplink      atomic.Pointer[uplink.Uplink]     // a gateway's session to its centre; nil without upstream
	shared      *sockets.Shared                   // the protected sockets' listeners with pool.shared_listeners; nil without
	version     string                            // of the binary, for iotsafe status
	upSince     time.Time                         // for iotsafe status
	readyFile   string                            // absolute path of the --ready-file, or ""
}

// Options are what the caller decides besides the config file.
type Options struct {
	DataDir string
	Logger  *slog.Logger   // nil: a logger built from cfg.Log on stderr
	Level   *slog.LevelVar // the level Logger uses, so SIGHUP can change it
	Version string         // the binary's version, which iotsafe status shows
	// ReadyFile is where the caller writes the ready file ('' for none): the admin
	// socket reports it, so that a backup leaves it out.
	ReadyFile string
}

// Start opens the registry, loads or creates host keys, and starts every component. The
// hub serves once Start returns nil; Close stops it.
func Start(ctx context.Context, cfg Config, opt Options) (*Hub, error) {
	insecure, err := cfg.Validate()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	h := &Hub{cfg: cfg, dir: opt.DataDir, portsChanged: make(chan struct{}, 1), log: opt.Logger, level: opt.Level, ids: access.NewIdentities(0),
		version: opt.Version, upSince: time.Now()}
	if opt.ReadyFile != "" {
		h.readyFile, _ = filepath.Abs(opt.ReadyFile)
	}
	if h.log == nil {
		h.log, h.level = logging.New(cfg.Log, os.Stderr)
	}
	if cfg.Source != "" {
		h.log.Info("configuration", "source", cfg.Source)
	}
	h.warnInsecure(insecure)
	// First of all: nothing in the folder is touched without its lock.
	if h.dataLock, err = LockData(h.dir); err != nil {
		return nil, err
	}
	if err := privateDataDir(h.dir, cfg.Admin.Group, h.log); err != nil {
		h.dataLock.Release()
		return nil, err
	}
	raiseFileLimit(h.log)
	ctx, h.cancel = context.WithCancel(ctx)
	h.parts = h.components()
	for _, p := range h.parts {
		h.started++
		if p.start == nil {
			continue
		}
		if err := p.start(ctx); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// warnInsecure logs every insecure setting the configuration lets through.
func (h *Hub) warnInsecure(insecure []string) {
	cfg := h.cfg
	sshWeak := 0
	for _, a := range insecure {
		// "ssh: aes128-cbc", "frontdoor.tls: TLS 1.0", each let through by its section's
		// allow_insecure.
		section, algorithm, _ := strings.Cut(a, ": ")
		if strings.HasSuffix(section, ".insecure_plain") || section == "jwt.allow_unsigned" {
			h.log.Warn("insecure: "+section+" is set", "detail", algorithm)
			continue
		}
		optIn := section + ".allow_insecure"
		if section == "soap" {
			optIn = "soap.allow_legacy" // the paper's CBC/SHA-1 suite for SOAP messages
		}
		h.log.Warn("insecure algorithm enabled by "+optIn, "algorithm", algorithm)
		if section == "ssh" {
			sshWeak++
		}
	}
	if cfg.Registry.InlinePassword() {
		h.log.Warn("registry.dsn holds a password: whoever can read the config can read the registry; use ?passfile=/path/to/pgpass (mode 0600) or PGPASSFILE instead")
	}
	if cfg.SSH.Crypto.AllowInsecure && sshWeak == 0 {
		h.log.Warn("ssh.allow_insecure is set but no insecure algorithm is listed: it enables nothing by itself; name the algorithms in ssh.kex, ciphers, macs, host_key_algorithms or device_key_algorithms")
	}
}

// FrontdoorAddr is the front door's HTTPS address, or nil when it is off.
func (h *Hub) FrontdoorAddr() net.Addr { return h.frontAt }

// MetricsAddr is where /metrics is served; nil when metrics are off.
func (h *Hub) MetricsAddr() net.Addr { return h.metricsAt }

// Policy implements restapi.Hub: the grants snapshot both local layers use.
func (h *Hub) Policy() *access.Policy { return h.access.Policy() }

// Online implements frontdoor.Sessions and restapi.Hub.
func (h *Hub) Online(device string) bool {
	return h.ssh.Online(device) || h.onPeer(device)
}

// SSHAddr is where devices connect.
func (h *Hub) SSHAddr() net.Addr { return h.sshAddr }

// HostKeys returns the public host keys (for printing fingerprints).
func (h *Hub) HostKeys() []ssh.PublicKey {
	out := make([]ssh.PublicKey, len(h.hostKeys))
	for i, k := range h.hostKeys {
		out[i] = k.PublicKey()
	}
	return out
}

// Registry gives in-process callers (the demo, tests) the hub's registry.
func (h *Hub) Registry() *registry.Registry { return h.reg }

// OnlineDevices implements admin.Handler.
func (h *Hub) OnlineDevices() map[string]bool { return h.ssh.OnlineDevices() }

// Reload applies what can change without a restart: the log level and what each
// component takes (components.go); the rest is named in a warning.
func (h *Hub) Reload(cfg Config) error {
	if _, err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	for _, p := range h.parts[:h.started] {
		if p.reload == nil {
			continue
		}
		if err := p.reload(cfg); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrConfig, p.name, err)
		}
	}
	if h.level != nil {
		h.level.Set(logging.Level(cfg.Log.Level))
	}
	h.log.Info("configuration reloaded (log level, keepalive and takeover timings; other changes need a restart)")
	return nil
}

// Close stops every started component in reverse order and waits for sessions to end.
func (h *Hub) Close() {
	h.closeOne.Do(func() {
		for i := h.started - 1; i >= 0; i-- {
			if c := h.parts[i].close; c != nil {
				c()
			}
		}
		h.dataLock.Release()
	})
}

// leaseHolder names this hub in the registry's serving lease: its host and data folder,
// so the same hub started again takes its lease over at once.
func leaseHolder(dir string) string {
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return "hub " + host + ":" + dir
}

// Failed delivers an error when the hub can no longer serve safely (another hub took
// over its PostgreSQL registry); the caller then stops it.
func (h *Hub) Failed() <-chan error { return h.lease.Lost() }

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: every forward and
// channel holds descriptors.
func raiseFileLimit(log *slog.Logger) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur < lim.Max {
		old := lim.Cur
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
			log.Debug("raised open-file limit", "from", old, "to", lim.Max)
		}
	}
}

// privateDataDir creates the data folder or tightens it to 0711: others may traverse it
// to reach the resolver socket (0666) but not list it; everything inside is 0600 except
// that socket and, with an admin group, the admin socket (0660).
func privateDataDir(dir, group string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("hub: data folder: %w", err)
	}
	want := os.FileMode(0o711)
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return fmt.Errorf("hub: admin.group %q: %w", group, err)
		}
		gid, _ := strconv.Atoi(g.Gid)
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("hub: data folder: %w", err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("hub: data folder: %w", err)
	}
	if fi.Mode().Perm() != want {
		log.Info("tightening data folder permissions", "folder", dir, "from", fi.Mode().Perm().String(), "to", want.String())
		if err := os.Chmod(dir, want); err != nil {
			return fmt.Errorf("hub: data folder: %w", err)
		}
	}
	return nil
}

// rehome moves devices whose allocation lies outside the registry's pool (written before
// the registry recorded its pool) into it, with a log line each: such a socket would fall
// outside the kernel layer's protection, so it is never served where it is.
func (h *Hub) rehome(ctx context.Context) error {
	moves, err := h.reg.MovePool(ctx, sockets.Config{})
	if err != nil {
		return fmt.Errorf("hub: moving allocations into the pool %s: %w", h.reg.Pool().Prefix(), err)
	}
	for _, m := range moves {
		h.log.Warn("device allocation was outside the pool; moved into it", "device", m.Device, "from", m.From.String(), "to", m.To.String(),
			"pool", h.reg.Pool().Prefix().String(), "sockets", len(m.Sockets))
	}
	return nil
}
