package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/user"
	"strconv"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/firewall"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// AccessConfig selects the enforcement layers.
type AccessConfig struct {
	// UserSpace is "on" (the default, also for "") or "off": check the owner of every local
	// connection to a protected socket (sock_diag) against the grants.
	UserSpace string `yaml:"userspace"`
	// Kernel is "auto" (the default, also for ""): the hub's own nftables table when the hub
	// may manage nftables (root or CAP_NET_ADMIN); "on": refuse to start without it; "off".
	Kernel string `yaml:"kernel"`
	// Table names the hub's nftables table (family inet); "" means "iotsafe".
	Table string `yaml:"table"`
}

func (c AccessConfig) validate() error {
	switch c.UserSpace {
	case "", "on", "off":
	default:
		return fmt.Errorf("access.userspace: %q is not one of on, off", c.UserSpace)
	}
	switch c.Kernel {
	case "", "auto", "on", "off":
	default:
		return fmt.Errorf("access.kernel: %q is not one of auto, on, off", c.Kernel)
	}
	if c.Table != "" && !profile.ValidName(c.Table) {
		return fmt.Errorf("access.table: %q: use lower-case letters, digits and '-'", c.Table)
	}
	return nil
}

// startKernel sets up the kernel layer as configured.
func (h *Hub) startKernel() error {
	mode, table := h.cfg.Access.Kernel, h.cfg.Access.Table
	if table == "" {
		table = firewall.DefaultTable
	}
	if mode == "off" {
		h.log.Info("access.kernel is off: only the user-space layer protects the sockets")
		return nil
	}
	k, err := firewall.NewKernel(table)
	if err == nil {
		// Only the table's owner may replace or delete it: another hub on this host (a
		// 'make demo' beside a production hub) must not touch it.
		h.kernelClaim, err = firewall.ClaimTable(table, -1)
	}
	if err != nil {
		if mode == "on" {
			return fmt.Errorf("hub: access.kernel is on but %w", err)
		}
		if errors.Is(err, firewall.ErrTableOwned) {
			h.log.Warn("kernel layer off: its table belongs to another hub on this host; the user-space layer protects the sockets", "reason", err.Error())
		} else {
			h.log.Info("kernel layer unavailable; the user-space layer protects the sockets", "reason", err.Error())
		}
		return nil
	}
	h.kernel = k
	h.log.Info("kernel layer on", "nftables_table", "inet "+table)
	return nil
}

// applyKernel compiles the policy and the sockets into the hub's nftables table.
func (h *Hub) applyKernel(ctx context.Context, p *access.Policy) error {
	if h.kernel == nil {
		return nil
	}
	devs, err := h.reg.Devices(ctx)
	if err != nil {
		return err
	}
	r := firewall.Rules{Pool: h.reg.Pool().Prefix(), SuperUIDs: []uint32{0}}
	if h.selfUID != 0 {
		r.SuperUIDs = append(r.SuperUIDs, h.selfUID)
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
						members[g.XID] = access.GroupMembers(g.XID)
					}
					for _, uid := range members[g.XID] {
						r.AllowUID = append(r.AllowUID, firewall.Entry{ID: uid, Addr: s.Addr})
					}
				}
			}
		}
	}
	// Replacing the table resets its counters: report what they hold first, or refusals
	// since the last watchKernel tick would be lost.
	h.reportRefusedLocked(ctx)
	if err := h.kernel.Apply(r); err != nil {
		return err
	}
	h.refusedSeen.Store(0)
	h.log.Debug("kernel rules applied", "uid_entries", len(r.AllowUID), "gid_entries", len(r.AllowGID))
	return nil
}

// watchKernel turns the kernel layer's refusal counters into audit events.
func (h *Hub) watchKernel(ctx context.Context, every time.Duration) {
	if h.kernel == nil {
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
		h.kernelMu.Lock()
		h.reportRefusedLocked(ctx)
		h.kernelMu.Unlock()
	}
}

// reportRefusedLocked records the kernel layer's refusals since the last report; the
// caller holds kernelMu.
func (h *Hub) reportRefusedLocked(ctx context.Context) {
	n, err := h.kernel.Refused()
	if err != nil {
		return
	}
	if last := h.refusedSeen.Swap(n); n > last {
		detail := fmt.Sprintf("kernel layer refused %d packet(s) to protected sockets from processes without a permission (the kernel does not report which)", n-last)
		h.log.Warn("access denied by the kernel layer", "packets", n-last)
		ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
		h.guard.AddEvent(ctx2, registry.Event{Kind: registry.EventAccessDenied, Detail: detail})
		cancel()
	}
}

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

// ReloadAccess rebuilds the policy from the registry (admin.Handler; called at start and
// after grant, ungrant and device-group changes).
func (h *Hub) ReloadAccess() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Every change up to here is in what we read next: the change feed need not reload
	// for them again.
	upTo, err := h.reg.LastEventID(ctx)
	if err != nil {
		return err
	}
	grants, err := h.reg.Grants(ctx)
	if err != nil {
		return err
	}
	groups, err := h.reg.DeviceGroups(ctx)
	if err != nil {
		return err
	}
	gid, err := adminGID(h.cfg.Admin.Group)
	if err != nil {
		return err
	}
	p := access.NewPolicy(grants, groups, gid)
	h.kernelMu.Lock()
	defer h.kernelMu.Unlock()
	// Kernel first: a failure leaves both layers on the previous policy.
	if err := h.applyKernel(ctx, p); err != nil {
		h.log.Error("kernel rules not applied; keeping the previous ones", "err", err)
		return err
	}
	h.policy.Store(p)
	for {
		if old := h.policyUpTo.Load(); old >= upTo || h.policyUpTo.CompareAndSwap(old, upTo) {
			break
		}
	}
	h.log.Debug("access policy loaded", "grants", len(grants))
	var frontErr error
	if h.front != nil {
		// Accounts and tokens first: the telemetry paths check their clients against them.
		frontErr = h.front.Reload(ctx)
	}
	h.reloadTelemetry() // devices, secrets; MQTT clients of removed devices and accounts go
	return frontErr
}

// authorize is the user-space layer: the kernel says which uid owns the connecting
// socket; its grants decide.
func (h *Hub) authorize(c net.Conn, device, alias string) error {
	uid, err := firewall.PeerUID(c)
	if err != nil {
		return fmt.Errorf("cannot identify the local process: %w", err)
	}
	if uid == h.selfUID {
		return nil // the hub's own services (front door) check their users themselves
	}
	id := h.ids.Lookup(uid, nil)
	if h.policy.Load().Allowed(id, device, alias) {
		return nil
	}
	err = fmt.Errorf("permission denied: %s may not reach %s/%s", id, device, alias)
	h.denied.record(h, id.UID, device, "connect", err.Error())
	return err
}

// Resolve implements resolver.Backend.
func (h *Hub) Resolve(ctx context.Context, caller access.Identity, device, alias string) (string, error) {
	p := h.policy.Load()
	if !p.Allowed(caller, device, alias) {
		msg := fmt.Sprintf("permission denied: %s may not reach %s/%s", caller, device, alias)
		h.denied.record(h, caller.UID, device, "resolve", msg)
		return "", &resolver.Error{Code: resolver.CodeDenied, Msg: msg}
	}
	d, err := h.reg.Device(ctx, device)
	if errors.Is(err, registry.ErrNotFound) {
		return "", &resolver.Error{Code: resolver.CodeNotFound, Msg: fmt.Sprintf("no device %s", device)}
	}
	if err != nil {
		return "", err
	}
	for _, s := range d.Sockets {
		if s.Alias == alias {
			return s.Addr.String(), nil
		}
	}
	return "", &resolver.Error{Code: resolver.CodeNotFound, Msg: fmt.Sprintf("device %s has no service %s", device, alias)}
}

// deniedLog records access_denied events at most once every 10 s per local user and
// operation (resolve, connect), whatever device the user asked for, saying how many
// denials it held back: a process that tries every device name in a loop cannot flood
// the audit log.
type deniedLog struct {
	once sync.Once
	gate *throttle.LogGate
}

// deniedEvery is how often one user's denials reach the audit log.
const deniedEvery = 10 * time.Second

func (l *deniedLog) record(h *Hub, uid uint32, device, op, msg string) {
	l.once.Do(func() { l.gate = throttle.NewLogGate(deniedEvery) })
	detail := op + ": " + msg
	ok, n := l.gate.Allow(op + " " + strconv.FormatUint(uint64(uid), 10))
	if !ok {
		return
	}
	if n > 0 {
		detail = fmt.Sprintf("%s (and %d more %s denials of uid %d since the last record)", detail, n, op, uid)
	}
	h.log.Warn("access denied", "device", device, "uid", uid, "detail", detail)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.guard.AddEvent(ctx, registry.Event{Device: device, Kind: registry.EventAccessDenied, Detail: detail}); err != nil {
		h.log.Error("recording access_denied failed", "err", err)
	}
}
