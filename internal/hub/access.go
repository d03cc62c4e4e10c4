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
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
)

// AccessConfig selects the enforcement layers.
type AccessConfig struct {
	// UserSpace is "on" (the default, also for "") or "off": check the owner of every local
	// connection to a protected socket (sock_diag) against the grants.
	UserSpace string `yaml:"userspace"`
}

func (c AccessConfig) validate() error {
	switch c.UserSpace {
	case "", "on", "off":
		return nil
	}
	return fmt.Errorf("access.userspace: %q is not one of on, off", c.UserSpace)
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
	h.policy.Store(access.NewPolicy(grants, groups, gid))
	h.log.Debug("access policy loaded", "grants", len(grants))
	return nil
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
	h.denied.record(h, device, "connect: "+err.Error())
	return err
}

// Resolve implements resolver.Backend.
func (h *Hub) Resolve(ctx context.Context, caller access.Identity, device, alias string) (string, error) {
	p := h.policy.Load()
	if !p.Allowed(caller, device, alias) {
		msg := fmt.Sprintf("permission denied: %s may not reach %s/%s", caller, device, alias)
		h.denied.record(h, device, "resolve: "+msg)
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

// deniedLog records access_denied events, at most one per (device, detail) every 10 s,
// so a process retrying in a loop cannot flood the audit log.
type deniedLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	supp map[string]int
}

func (l *deniedLog) record(h *Hub, device, detail string) {
	l.mu.Lock()
	if l.last == nil {
		l.last, l.supp = map[string]time.Time{}, map[string]int{}
	}
	key := device + "\x00" + detail
	if t, ok := l.last[key]; ok && time.Since(t) < 10*time.Second {
		l.supp[key]++
		l.mu.Unlock()
		return
	}
	if n := l.supp[key]; n > 0 {
		detail = fmt.Sprintf("%s (and %d more in the last 10s)", detail, n)
	}
	if len(l.last) > 10000 {
		clear(l.last)
		clear(l.supp)
	}
	l.last[key], l.supp[key] = time.Now(), 0
	l.mu.Unlock()
	h.log.Warn("access denied", "device", device, "detail", detail)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.reg.AddEvent(ctx, registry.Event{Device: device, Kind: registry.EventAccessDenied, Detail: detail}); err != nil {
		h.log.Error("recording access_denied failed", "err", err)
	}
}
