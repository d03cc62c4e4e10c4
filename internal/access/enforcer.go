package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/firewall"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Layers selects the enforcement layers (hub.yaml "access:" and "admin.group").
type Layers struct {
	// UserSpace checks the owner of every local connection to a protected socket
	// (sock_diag) against the grants.
	UserSpace bool
	// Kernel is "auto" (also ""): the enforcer's own nftables table when this process may
	// manage nftables (root or CAP_NET_ADMIN); "on": NewEnforcer fails without it; "off".
	Kernel string
	// Table names the nftables table (family inet); "" means firewall.DefaultTable.
	Table string
	// AdminGroup names the operating-system group whose members reach every device.
	AdminGroup string
}

// Store is what the enforcer reads of the registry.
type Store interface {
	LastChangeID(ctx context.Context) (int64, error)
	Grants(ctx context.Context) ([]registry.Grant, error)
	DeviceGroups(ctx context.Context) (map[string][]string, error)
	Devices(ctx context.Context) ([]*registry.Device, error)
	Pool() *sockets.Pool
}

// Auditor records what the enforcer refused.
type Auditor interface {
	AddEvent(ctx context.Context, e registry.Event) error
}

// Enforcer owns both local layers of access control — the kernel's nftables rules and
// the user-space check of each connection's owner — over one policy snapshot, and the
// audit of what they refuse. The SSH server, the resolver and the front door are handed
// the same enforcer, so they never disagree about who may reach what.
type Enforcer struct {
	layers  Layers
	store   Store
	audit   Auditor
	ids     *Identities
	log     *slog.Logger
	selfUID uint32

	policy atomic.Pointer[Policy]
	upTo   atomic.Int64 // the newest audit event the loaded policy includes

	kernelMu sync.Mutex // kernel rules, their counters, and closing
	kernel   *firewall.Kernel
	// kernelWhy says why the kernel layer is off ('' when on), for 'iotsafe doctor'.
	kernelWhy string
	claim     *firewall.Claim // the right to manage kernel's table; released after removing it
	closed    bool
	seen      atomic.Uint64 // kernel refusals already reported

	denied deniedLog
}

// NewEnforcer sets up the kernel layer as layers asks and loads the policy. ids
// caches user names (nil: a new cache); log nil discards.
func NewEnforcer(layers Layers, store Store, audit Auditor, ids *Identities, log *slog.Logger) (*Enforcer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ids == nil {
		ids = NewIdentities(0)
	}
	switch layers.Kernel {
	case "", "auto", "on", "off":
	default:
		return nil, fmt.Errorf("access: kernel layer %q is not one of auto, on, off", layers.Kernel)
	}
	e := &Enforcer{layers: layers, store: store, audit: audit, ids: ids, log: log, selfUID: uint32(os.Getuid())}
	e.denied.gate = throttle.NewLogGate(deniedEvery)
	if err := e.startKernel(); err != nil {
		return nil, err
	}
	if !layers.UserSpace {
		log.Warn("access.userspace is off: any local user can reach every protected socket")
	}
	if err := e.Reload(context.Background()); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Enforcer) startKernel() error {
	mode, table := e.layers.Kernel, e.layers.Table
	if table == "" {
		table = firewall.DefaultTable
	}
	if mode == "off" {
		e.kernelWhy = "access.kernel is off"
		e.log.Info("access.kernel is off: only the user-space layer protects the sockets")
		return nil
	}
	k, err := firewall.NewKernel(table)
	if err == nil {
		// Only the table's owner may replace or delete it: another hub on this host (a
		// 'make demo' beside a production hub) must not touch it.
		e.claim, err = firewall.ClaimTable(table, -1)
	}
	if err != nil {
		if mode == "on" {
			return fmt.Errorf("access.kernel is on but %w", err)
		}
		e.kernelWhy = err.Error()
		if errors.Is(err, firewall.ErrTableOwned) {
			e.log.Warn("kernel layer off: its table belongs to another hub on this host; the user-space layer protects the sockets", "reason", err.Error())
		} else {
			e.log.Info("kernel layer unavailable; the user-space layer protects the sockets", "reason", err.Error())
		}
		return nil
	}
	e.kernel = k
	e.log.Info("kernel layer on", "nftables_table", "inet "+table)
	return nil
}

// Layers says which layers protect the sockets now, and why the kernel's is off if it is.
func (e *Enforcer) Layers() (kernel, userSpace bool, kernelOff string) {
	e.kernelMu.Lock()
	defer e.kernelMu.Unlock()
	return e.kernel != nil, e.layers.UserSpace, e.kernelWhy
}

// Policy is the grants snapshot both layers use now (the front door, the REST API and
// MQTT decide on it too).
func (e *Enforcer) Policy() *Policy { return e.policy.Load() }

// Reload rebuilds the policy and the kernel rules from the store. On a failure both
// layers keep the previous policy.
func (e *Enforcer) Reload(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Every change up to here is in what we read next: a change feed need not reload for
	// them again (Current).
	upTo, err := e.store.LastChangeID(ctx)
	if err != nil {
		return err
	}
	grants, err := e.store.Grants(ctx)
	if err != nil {
		return err
	}
	groups, err := e.store.DeviceGroups(ctx)
	if err != nil {
		return err
	}
	gid, err := adminGID(e.layers.AdminGroup)
	if err != nil {
		return err
	}
	p := NewPolicy(grants, groups, gid)
	e.kernelMu.Lock()
	defer e.kernelMu.Unlock()
	// Kernel first: a failure leaves both layers on the previous policy.
	if err := e.applyKernel(ctx, p); err != nil {
		e.log.Error("kernel rules not applied; keeping the previous ones", "err", err)
		return err
	}
	e.policy.Store(p)
	for {
		if old := e.upTo.Load(); old >= upTo || e.upTo.CompareAndSwap(old, upTo) {
			break
		}
	}
	e.log.Debug("access policy loaded", "grants", len(grants))
	return nil
}

// Current reports whether the loaded policy already includes the registry's changes up
// to audit event upTo.
func (e *Enforcer) Current(upTo int64) bool { return upTo > 0 && upTo <= e.upTo.Load() }

func adminGID(group string) (int, error) {
	if group == "" {
		return -1, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return -1, fmt.Errorf("admin.group %q: %w", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// applyKernel compiles the policy and the sockets into the nftables table; the caller
// holds kernelMu.
func (e *Enforcer) applyKernel(ctx context.Context, p *Policy) error {
	if e.kernel == nil || e.closed {
		return nil
	}
	devs, err := e.store.Devices(ctx)
	if err != nil {
		return err
	}
	r := firewall.Rules{Pool: e.store.Pool().Prefix(), SuperUIDs: []uint32{0}, Senders: []uint32{e.selfUID}}
	if e.selfUID != 0 {
		r.SuperUIDs = append(r.SuperUIDs, e.selfUID)
	}
	if gid := p.AdminGID(); gid >= 0 {
		r.SuperGIDs = append(r.SuperGIDs, uint32(gid))
	}
	members := map[uint32][]uint32{}
	for _, d := range devs {
		for _, s := range d.Sockets {
			for _, g := range p.GrantsFor(d.Name, s.Alias) {
				switch g.Kind {
				case registry.PrincipalUser:
					r.AllowUID = append(r.AllowUID, firewall.Entry{ID: g.XID, Addr: s.Addr})
				case registry.PrincipalGroup:
					r.AllowGID = append(r.AllowGID, firewall.Entry{ID: g.XID, Addr: s.Addr})
					if _, ok := members[g.XID]; !ok {
						members[g.XID] = GroupMembers(g.XID)
					}
					for _, uid := range members[g.XID] {
						r.AllowUID = append(r.AllowUID, firewall.Entry{ID: uid, Addr: s.Addr})
					}
				}
			}
		}
	}
	// Replacing the table resets its counters: report what they hold first, or refusals
	// since the last Watch tick would be lost.
	e.reportRefusedLocked(ctx)
	if err := e.kernel.Apply(r); err != nil {
		return err
	}
	e.seen.Store(0)
	e.log.Debug("kernel rules applied", "uid_entries", len(r.AllowUID), "gid_entries", len(r.AllowGID))
	return nil
}

// Watch turns the kernel layer's refusal counters into audit events every interval
// until ctx ends.
func (e *Enforcer) Watch(ctx context.Context, every time.Duration) {
	if e.kernel == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.kernelMu.Lock()
		e.reportRefusedLocked(ctx)
		e.kernelMu.Unlock()
	}
}

// reportRefusedLocked records the kernel layer's refusals since the last report; the
// caller holds kernelMu.
func (e *Enforcer) reportRefusedLocked(ctx context.Context) {
	if e.closed {
		return
	}
	n, err := e.kernel.Refused()
	if err != nil {
		return
	}
	if last := e.seen.Swap(n); n > last {
		detail := fmt.Sprintf("kernel layer refused %d packet(s) to protected sockets from processes without a permission (the kernel does not report which)", n-last)
		e.log.Warn("access denied by the kernel layer", "packets", n-last)
		ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
		e.audit.AddEvent(ctx2, registry.Event{Kind: registry.EventAccessDenied, Detail: detail})
		cancel()
	}
}

// ConnectionCheck is the user-space layer for the SSH server's protected sockets: the
// kernel says which uid owns the connecting socket; its grants decide. It is nil when the
// layer is off.
func (e *Enforcer) ConnectionCheck() func(c net.Conn, device, alias string) error {
	if !e.layers.UserSpace {
		return nil
	}
	return e.authorize
}

func (e *Enforcer) authorize(c net.Conn, device, alias string) error {
	uid, err := firewall.PeerUID(c)
	if err != nil {
		return fmt.Errorf("cannot identify the local process: %w", err)
	}
	if uid == e.selfUID {
		return nil // the hub's own services (front door) check their users themselves
	}
	return e.Check(e.ids.Lookup(uid, nil), device, alias, "connect")
}

// Check decides whether a local caller may reach device/alias; op names what it tried
// (connect, resolve) in the audit log. A refusal is an error a person can read.
func (e *Enforcer) Check(caller Identity, device, alias, op string) error {
	if e.policy.Load().Allowed(caller, device, alias) {
		return nil
	}
	err := fmt.Errorf("permission denied: %s may not reach %s/%s", caller, device, alias)
	e.denied.record(e, caller.UID, device, op, err.Error())
	return err
}

// Close removes the kernel layer's table; the enforcer applies no rules after it.
func (e *Enforcer) Close() {
	e.kernelMu.Lock()
	defer e.kernelMu.Unlock()
	if e.closed || e.kernel == nil {
		e.closed = true
		return
	}
	e.closed = true
	if err := e.kernel.Remove(); err != nil {
		e.log.Error("removing the nftables table failed", "err", err)
	}
	e.claim.Release()
}

// deniedLog records access_denied events at most once every 10 s per local user and
// operation (resolve, connect), whatever device the user asked for, saying how many
// denials it held back: a process that tries every device name in a loop cannot flood
// the audit log.
type deniedLog struct {
	gate *throttle.LogGate
}

// deniedEvery is how often one user's denials reach the audit log.
const deniedEvery = 10 * time.Second

func (l *deniedLog) record(e *Enforcer, uid uint32, device, op, msg string) {
	detail := op + ": " + msg
	ok, n := l.gate.Allow(op + " " + strconv.FormatUint(uint64(uid), 10))
	if !ok {
		return
	}
	if n > 0 {
		detail = fmt.Sprintf("%s (and %d more %s denials of uid %d since the last record)", detail, n, op, uid)
	}
	e.log.Warn("access denied", "device", device, "uid", uid, "detail", detail)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.audit.AddEvent(ctx, registry.Event{Device: device, Kind: registry.EventAccessDenied, Detail: detail}); err != nil {
		e.log.Error("recording access_denied failed", "err", err)
	}
}
