package hub

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/frontdoor"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/memrelease"
	"github.com/iotsafe/iotsafe/internal/metrics"
	"github.com/iotsafe/iotsafe/internal/regguard"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/uplink"
)

// component is one part of the hub. Start runs the parts in list order; a part whose
// section is off starts nothing. Close runs close in reverse order for every part whose
// start ran, also one that failed halfway, so a close copes with what is still nil.
// Reload hands a new configuration to the running parts that take one.
type component struct {
	name   string
	start  func(context.Context) error
	reload func(Config) error
	close  func()
}

// components are the hub's parts in start order: each uses only those above it, and
// nothing serves devices until the last one.
func (h *Hub) components() []component {
	return []component{
		{name: "registry", start: h.openRegistry, close: h.closeRegistry},
		{name: "access", start: h.startAccess, close: func() {
			if h.access != nil {
				h.access.Close()
			}
		}},
		{name: "metrics", start: h.startMetrics},              // its server stops with the hub's context
		{name: "memory release", start: h.startMemoryRelease}, // stops with the hub's context
		{name: "telemetry store", start: h.openStore, close: func() {
			if h.store != nil {
				h.store.Close()
			}
		}},
		// The parts above outlive the hub's background work (the change feed, retention,
		// the kernel layer's counters, the uplink): it ends here, before they close.
		{name: "background work", close: h.cancel},
		{name: "telemetry paths", start: h.startTelemetry},
		{name: "sshd", start: h.startSSH, reload: h.reloadSSH, close: h.closeSSH},
		{name: "resolver", start: h.startResolver, close: func() {
			if h.resolver != nil {
				h.resolver.Close()
			}
		}},
		{name: "admin socket", start: h.startAdmin, close: func() {
			if h.admin != nil {
				h.admin.Close()
			}
		}},
		{name: "front door", start: h.startFrontdoor, reload: h.reloadFrontdoor, close: func() {
			if h.console != nil {
				h.console.Close()
			}
			if h.front != nil {
				h.front.Close()
			}
		}},
		{name: "device listener", start: h.startPlain, close: h.closePlain},
		{name: "device transports", start: h.startTransports, close: h.closeTransports},
		{name: "serving", start: h.startServing}, // the HTTP servers stop with their parts above
		{name: "uplink", start: h.startUplink},   // stops with the hub's context
		{name: "change feed", start: h.followChanges},
		{name: "devices", start: h.serveDevices},
	}
}

// openRegistry opens the registry with the host key (which the lease publishes for the
// other hubs of the registry), the change path, and the audit record of this start.
func (h *Hub) openRegistry(ctx context.Context) (err error) {
	cfg := h.cfg
	if h.reg, err = registry.Open(ctx, cfg.RegistryLocation(h.dir), cfg.Pool); err != nil {
		return err
	}
	h.reg.SetHub(cfg.HubName())
	keys, err := hostkey.Load(h.dir, cfg.SSH.Crypto.HostKeyAlgorithms)
	if err != nil {
		return err
	}
	h.hostKeys = keys.Signing
	h.hostKeySet.Store(keys)
	peer := registry.Peer{Addr: cfg.Registry.PeerAddress, HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.hostKeys[0].PublicKey())))}
	if h.lease, err = h.reg.LockServing(ctx, leaseHolder(h.dir), peer); err != nil {
		return err
	}
	h.log.Info("registry", "event", "registry_open", "database", h.reg.Dialect().String(), "at", h.reg.Where(), "hub", h.reg.Hub())
	h.guard = regguard.New(h.reg, h.log.With("component", "registry"), 0)
	h.control = control.New(h.guard, live{h})
	go h.guard.Run(ctx, 5*time.Second)
	if err := h.rehome(ctx); err != nil {
		return err
	}
	h.recordStart(ctx)
	return nil
}

func (h *Hub) closeRegistry() {
	if h.reg == nil {
		return
	}
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

// startMemoryRelease gives a burst's memory back once the hub is quiet (memory.
// release_when_quiet, on by default; package memrelease).
func (h *Hub) startMemoryRelease(ctx context.Context) error {
	if h.cfg.Memory.On() {
		go memrelease.New(nil).Run(ctx, h.log.With("component", "memory"))
	}
	return nil
}

func (h *Hub) startMetrics(ctx context.Context) error {
	if h.cfg.Metrics.Listen == "" {
		return nil
	}
	h.metrics = metrics.New(h.cfg.Metrics)
	addr, err := h.metrics.Serve(ctx, h.cfg.Metrics.Listen, h.log.With("component", "metrics"))
	if err != nil {
		return err
	}
	h.metricsAt = addr
	if err := h.metrics.Register(h.guard.Collectors()...); err != nil {
		return err
	}
	if err := h.metrics.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_backup_last_timestamp_seconds",
		Help: "When iotsafe backup last copied this hub's data folder (Unix time, from the audit log); 0 if never: alert on its age."},
		h.lastBackup)); err != nil {
		return err
	}
	h.log.Info("metrics", "url", "http://"+addr.String()+"/metrics")
	return nil
}

// lastBackup is the time of the newest backup of this hub's data folder, 0 if none (or
// the registry cannot say now).
func (h *Hub) lastBackup() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e, err := h.reg.LastBackup(ctx, h.cfg.HubName())
	if err != nil || e == nil {
		return 0
	}
	return float64(e.At.Unix())
}

// startSSH builds the device-facing SSH server and binds it; it serves from the last
// part on, once everything its callbacks reach runs.
func (h *Hub) startSSH(ctx context.Context) (err error) {
	cfg := h.cfg
	sc := cfg.SSH
	sc.Logger = h.log.With("component", "sshd")
	sc.Revoker = h.control         // a profile's on_violation: revoke takes the one change path
	sc.Join = h.join               // devices enrolling their own keys with join tokens
	sc.EnrolByCert = h.enrolByCert // devices with a certificate of a manufacturer's CA
	sc.HostCertificates = h.hostKeySet.Load().Certificates
	sc.Services = &h.services
	sc.SocketAllocated = func() {
		if err := h.reloadAccess(); err != nil {
			h.log.Error("access reload after a new socket failed", "err", err)
		}
	}
	if cfg.Upstream.Enabled() {
		sc.Relay = h.relayChanged
	}
	if h.store != nil {
		var reg uplink.Registerer
		if h.metrics != nil {
			reg = h.metrics
		}
		sink, err := uplink.NewCentre(h.store, reg) // gateways' notifications, when this hub is their centre
		if err != nil {
			return err
		}
		sc.Telemetry = sink
		sc.DevicesAdded = h.reloadTelemetry
	}
	if cfg.Pool.SharedListeners {
		h.shared = sockets.NewShared(h.log.With("component", "sockets"))
		sc.Shared = h.shared
	}
	if h.reg.Dialect() == sqldb.Postgres {
		h.startPeers(ctx, &sc)
	}
	sc.Authorize = h.access.ConnectionCheck() // nil with access.userspace off
	if h.metrics != nil {
		sc.Metrics = h.metrics
	}
	if h.ssh, err = sshd.New(sc, h.guard, h.hostKeys); err != nil {
		return err
	}
	h.logRotation(h.hostKeySet.Load())
	h.ssh.SetHostKeys(h.hostKeySet.Load())
	h.sshAddr, err = h.ssh.Listen()
	return err
}

func (h *Hub) reloadSSH(cfg Config) error {
	h.ssh.UpdatePolicy(cfg.SSH.KeepaliveInterval, cfg.SSH.KeepaliveTimeout, cfg.SSH.TakeoverProbe)
	return nil
}

func (h *Hub) closeSSH() {
	if h.ssh != nil {
		h.ssh.Close()
	}
	if h.shared != nil {
		h.shared.Close()
	}
	if h.peers != nil {
		h.peers.Close()
	}
}

func (h *Hub) startResolver(context.Context) (err error) {
	h.resolver, err = resolver.Listen(filepath.Join(h.dir, resolver.SocketName), h.access, h.guard, h.ids, h.log.With("component", "resolver"))
	return err
}

func (h *Hub) startAdmin(context.Context) (err error) {
	h.admin, err = admin.Listen(filepath.Join(h.dir, admin.SocketName), h.cfg.Admin.Group, h, h.log.With("component", "admin"))
	return err
}

// startFrontdoor serves people: the portal and the reverse proxy, with the accounts the
// REST API and MQTT's platform logins share.
func (h *Hub) startFrontdoor(ctx context.Context) (err error) {
	cfg := h.cfg.Frontdoor
	if !cfg.Enabled() {
		return nil
	}
	if h.accounts, err = authn.NewAccounts(ctx, h.guard, frontdoor.AccountLimits(cfg)); err != nil {
		return fmt.Errorf("hub: accounts: %w", err)
	}
	log := h.log.With("component", "frontdoor")
	f, err := frontdoor.New(cfg, h.dir, frontdoor.Deps{Devices: h.guard, Accounts: h.accounts, Access: h.access, Sessions: h, Log: log})
	if err != nil {
		return err
	}
	h.front = f
	if h.frontAt, err = f.Listen(); err != nil {
		return err
	}
	h.mountREST() // it serves from startServing on, once every path is mounted
	if err := h.mountConsole(); err != nil {
		return err
	}
	h.log.Info("front door", "listen", h.frontAt.String(), "domain", cfg.Domain)
	return nil
}

// reloadFrontdoor applies the front door's request limits; other front-door changes are
// named in a warning.
func (h *Hub) reloadFrontdoor(cfg Config) error {
	switch {
	case h.front != nil && cfg.Frontdoor.Enabled():
		restart, err := h.front.Reconfigure(cfg.Frontdoor)
		if err != nil {
			return err
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
	return nil
}

// followChanges applies what other processes and hubs write to the registry, and keeps
// the audit log within its bounds.
func (h *Hub) followChanges(ctx context.Context) error {
	go h.control.Follow(ctx, h.reg, control.DefaultPoll, h.changesFrom, h.log.With("component", "changes"))
	go h.pruneAudit(ctx, time.Hour)
	return nil
}

// serveDevices lets devices in: the last part, once everything their sessions reach runs.
func (h *Hub) serveDevices(context.Context) error {
	go func() {
		if err := h.ssh.Serve(); err != nil && !errors.Is(err, sshd.ErrClosed) {
			h.log.Error("ssh server stopped", "err", err)
		}
	}()
	return nil
}
