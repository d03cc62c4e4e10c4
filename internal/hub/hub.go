package hub

import (
	"context"
	"errors"
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
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/firewall"
	"github.com/iotsafe/iotsafe/internal/frontdoor"
	"github.com/iotsafe/iotsafe/internal/metrics"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/peerlink"
	"github.com/iotsafe/iotsafe/internal/regguard"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/uplink"
)

// Hub is one running host server.
type Hub struct {
	cfg         Config
	dir         string
	log         *slog.Logger
	level       *slog.LevelVar
	reg         *registry.Registry
	guard       *regguard.Guard // reg as live subsystems use it: holds revocations, violations and audit events when reg cannot write
	ssh         *sshd.Server
	admin       *admin.Server
	metrics     *metrics.Metrics
	hostKeys    []ssh.Signer
	sshAddr     net.Addr
	resolver    *resolver.Server
	front       *frontdoor.Server
	frontAt     net.Addr
	metricsAt   net.Addr
	policy      atomic.Pointer[access.Policy]
	policyUpTo  atomic.Int64 // the newest audit event the loaded policy includes
	ids         *access.Identities
	denied      deniedLog
	selfUID     uint32
	kernel      *firewall.Kernel
	kernelClaim *firewall.Claim // the right to manage kernel's table; released after removing it
	kernelMu    sync.Mutex
	// refusedSeen is the kernel refusal counter already reported.
	refusedSeen atomic.Uint64
	cancel      context.CancelFunc
	closeOne    sync.Once
	dataLock    *DataLock
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
	relayMisses missCache        // addresses no live peer serves, for a second (peers.go)
	recorded    bool             // hub_started was recorded: Close records hub_stopped
	store       *telemetry.Store // nil without a telemetry path
	api         *restapi.API
	soap        *soap.Endpoint                    // nil unless soap.enabled
	devices     *devicedir.Directory              // device identities of the telemetry paths; nil without one
	mqtt        atomic.Pointer[mqttbroker.Broker] // nil when off; set after the admin socket listens
	plainREST   *restapi.Plain
	uplink      atomic.Pointer[uplink.Uplink] // a gateway's session to its centre; nil without upstream
	shared      *sockets.Shared               // the protected sockets' listeners with pool.shared_listeners; nil without
	version     string                        // of the binary, for iotsafe status
	started     time.Time                     // for iotsafe status
}

// Options are what the caller decides besides the config file.
type Options struct {
	DataDir string
	Logger  *slog.Logger   // nil: a logger built from cfg.Log on stderr
	Level   *slog.LevelVar // the level Logger uses, so SIGHUP can change it
	Version string         // the binary's version, which iotsafe status shows
}

// Start opens the registry, loads or creates host keys, and binds every listener. The hub
// serves once Start returns nil; Close stops it.
func Start(ctx context.Context, cfg Config, opt Options) (*Hub, error) {
	insecure, err := cfg.Validate()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	h := &Hub{cfg: cfg, dir: opt.DataDir, portsChanged: make(chan struct{}, 1), log: opt.Logger, level: opt.Level, ids: access.NewIdentities(0), selfUID: uint32(os.Getuid()),
		version: opt.Version, started: time.Now()}
	if h.log == nil {
		h.log, h.level = NewLogger(cfg.Log, os.Stderr)
	}
	if cfg.Source != "" {
		h.log.Info("configuration", "source", cfg.Source)
	}
	sshWeak := 0
	for _, a := range insecure {
		// "ssh: aes128-cbc", "frontdoor.tls: TLS 1.0", each let through by its section's
		// allow_insecure.
		section, algorithm, _ := strings.Cut(a, ": ")
		if strings.HasSuffix(section, ".insecure_plain") {
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
	ok := false
	defer func() {
		if !ok {
			h.Close()
		}
	}()
	if h.reg, err = registry.Open(ctx, cfg.RegistryLocation(h.dir), cfg.Pool); err != nil {
		return nil, err
	}
	h.reg.SetHub(cfg.HubName())
	// The host key first: the lease publishes it for the other hubs of the registry.
	if h.hostKeys, err = LoadHostKeys(h.dir, cfg.SSH.Crypto.HostKeyAlgorithms); err != nil {
		return nil, err
	}
	peer := registry.Peer{Addr: cfg.Registry.PeerAddress, HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.hostKeys[0].PublicKey())))}
	if h.lease, err = h.reg.LockServing(ctx, leaseHolder(h.dir), peer); err != nil {
		return nil, err
	}
	h.log.Info("registry", "event", "registry_open", "database", h.reg.Dialect().String(), "at", h.reg.Where(), "hub", h.reg.Hub())
	h.guard = regguard.New(h.reg, h.log.With("component", "registry"), 0)
	h.control = control.New(h.guard, live{h})
	go h.guard.Run(ctx, 5*time.Second)
	if err := h.rehome(ctx); err != nil {
		return nil, err
	}
	h.recordStart(ctx)
	if err := h.startKernel(); err != nil {
		return nil, err
	}
	if err := h.ReloadAccess(); err != nil {
		return nil, err
	}
	go h.watchKernel(ctx, 5*time.Second)
	changesFrom, err := h.reg.LastEventID(ctx)
	if err != nil {
		return nil, err
	}
	sc := cfg.SSH
	sc.Logger = h.log.With("component", "sshd")
	sc.Revoker = h.control // a profile's on_violation: revoke takes the one change path
	sc.SocketAllocated = func() {
		if err := h.ReloadAccess(); err != nil {
			h.log.Error("access reload after a new socket failed", "err", err)
		}
	}
	if cfg.Upstream.Enabled() {
		sc.Relay = h.relayChanged
	}
	if cfg.Pool.SharedListeners {
		h.shared = sockets.NewShared(h.log.With("component", "sockets"))
		sc.Shared = h.shared
	}
	if h.reg.Dialect() == sqldb.Postgres {
		h.startPeers(ctx, &sc)
	}
	if cfg.Access.UserSpace != "off" {
		sc.Authorize = h.authorize
	} else {
		h.log.Warn("access.userspace is off: any local user can reach every protected socket")
	}
	if cfg.Metrics.Listen != "" {
		h.metrics = metrics.New()
		sc.Metrics = h.metrics
		addr, err := h.metrics.Serve(ctx, cfg.Metrics.Listen)
		if err != nil {
			return nil, err
		}
		h.metricsAt = addr
		if err := h.metrics.Register(registryGauges(h.guard)...); err != nil {
			return nil, err
		}
		h.log.Info("metrics", "url", "http://"+addr.String()+"/metrics")
	}
	// Before any listener: the admin socket and sshd's callbacks reach the API.
	if err := h.startTelemetry(ctx); err != nil {
		return nil, err
	}
	if h.ssh, err = sshd.New(sc, h.guard, h.hostKeys); err != nil {
		return nil, err
	}
	if h.sshAddr, err = h.ssh.Listen(); err != nil {
		return nil, err
	}
	if h.resolver, err = resolver.Listen(filepath.Join(h.dir, resolver.SocketName), h, h.ids, h.log.With("component", "resolver")); err != nil {
		return nil, err
	}
	if h.admin, err = admin.Listen(filepath.Join(h.dir, admin.SocketName), cfg.Admin.Group, h, h.log.With("component", "admin")); err != nil {
		return nil, err
	}
	if cfg.Frontdoor.Enabled() {
		if err := h.startFrontdoor(ctx); err != nil {
			return nil, err
		}
	}
	h.serveREST()
	if err := h.startMQTT(); err != nil {
		return nil, err
	}
	if cfg.Upstream.Enabled() {
		if err := h.startUplink(ctx); err != nil {
			return nil, err
		}
	}
	go h.control.Follow(ctx, h.reg, control.DefaultPoll, changesFrom, h.log.With("component", "changes"))
	go h.pruneAudit(ctx, time.Hour)
	go func() {
		if err := h.ssh.Serve(); err != nil && !errors.Is(err, sshd.ErrClosed) {
			h.log.Error("ssh server stopped", "err", err)
		}
	}()
	ok = true
	return h, nil
}

func (h *Hub) startFrontdoor(ctx context.Context) error {
	f, err := frontdoor.New(ctx, h.cfg.Frontdoor, h.dir, h.reg, h, h.log.With("component", "frontdoor"))
	if err != nil {
		return err
	}
	if h.frontAt, err = f.Listen(); err != nil {
		return err
	}
	h.front = f
	h.mountREST()
	go func() {
		if err := f.Serve(); err != nil {
			h.log.Error("front door stopped", "err", err)
		}
	}()
	h.log.Info("front door", "listen", h.frontAt.String(), "domain", h.cfg.Frontdoor.Domain)
	return nil
}

// FrontdoorAddr is the front door's HTTPS address, or nil when it is off.
func (h *Hub) FrontdoorAddr() net.Addr { return h.frontAt }

// MetricsAddr is where /metrics is served; nil when metrics are off.
func (h *Hub) MetricsAddr() net.Addr { return h.metricsAt }

// Policy implements frontdoor.Backend: the grants snapshot both local layers use.
func (h *Hub) Policy() *access.Policy { return h.policy.Load() }

// Online implements frontdoor.Backend.
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

// Reload applies what can change without a restart: log level, keepalive timings and
// the front door's request limits. Other front-door changes are named in a warning.
func (h *Hub) Reload(cfg Config) error {
	if _, err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch {
	case h.front != nil && cfg.Frontdoor.Enabled():
		restart, err := h.front.Reconfigure(cfg.Frontdoor)
		if err != nil {
			return fmt.Errorf("%w: frontdoor: %v", ErrConfig, err)
		}
		h.log.Info("front door limits reloaded (max_body, response_timeout, routes)")
		if len(restart) > 0 {
			h.log.Warn("front door settings changed that take effect only at a restart; the running ones stay", "settings", strings.Join(restart, ", "))
		}
	case h.front != nil:
		h.log.Warn("the front door stays on until the hub restarts (frontdoor.listen was removed)")
	case cfg.Frontdoor.Enabled():
		h.log.Warn("the front door starts only when the hub restarts (frontdoor.listen was added)")
	}
	if h.level != nil {
		h.level.Set(parseLevel(cfg.Log.Level))
	}
	h.ssh.UpdatePolicy(cfg.SSH.KeepaliveInterval, cfg.SSH.KeepaliveTimeout, cfg.SSH.TakeoverProbe)
	h.log.Info("configuration reloaded (log level, keepalive and takeover timings; other changes need a restart)")
	return nil
}

// Close shuts everything down and waits for sessions to end.
func (h *Hub) Close() {
	h.closeOne.Do(func() {
		if h.front != nil {
			h.front.Close()
		}
		if h.plainREST != nil {
			h.plainREST.Close()
		}
		if b := h.mqtt.Load(); b != nil {
			b.Close()
		}
		if h.admin != nil {
			h.admin.Close()
		}
		if h.resolver != nil {
			h.resolver.Close()
		}
		if h.ssh != nil {
			h.ssh.Close()
		}
		if h.shared != nil {
			h.shared.Close()
		}
		if h.peers != nil {
			h.peers.Close()
		}
		if h.cancel != nil {
			h.cancel()
		}
		if h.kernel != nil {
			h.kernelMu.Lock()
			if err := h.kernel.Remove(); err != nil {
				h.log.Error("removing the nftables table failed", "err", err)
			}
			h.kernelClaim.Release()
			h.kernelMu.Unlock()
		}
		if h.store != nil {
			h.store.Close()
		}
		if h.reg != nil {
			if h.recorded {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := h.guard.AddEvent(ctx, registry.Event{Kind: registry.EventHubStopped, Detail: "clean stop"}); err != nil {
					h.log.Error("recording the stop failed", "err", err)
				}
				cancel()
			}
			if h.lease != nil {
				h.lease.Release()
			}
			h.reg.Close()
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
