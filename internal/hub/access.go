package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/profile"
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

// layers are the access section as the enforcer takes it.
func (c AccessConfig) layers(adminGroup string) access.Layers {
	return access.Layers{UserSpace: c.UserSpace != "off", Kernel: c.Kernel, Table: c.Table, AdminGroup: adminGroup}
}

// startAccess starts the enforcer (the kernel layer, the user-space check, the denied
// log) on the registry's grants. The change feed follows from before the policy's read,
// so no change falls between the two.
func (h *Hub) startAccess(ctx context.Context) (err error) {
	if h.changesFrom, err = h.reg.LastChangeID(ctx); err != nil {
		return err
	}
	if h.access, err = access.NewEnforcer(h.cfg.Access.layers(h.cfg.Admin.Group), h.reg, h.guard, h.ids, h.log); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	go h.access.Watch(ctx, 5*time.Second)
	return nil
}

// reloadAccess rebuilds the policy and the kernel rules, then every view built on the
// registry's devices and accounts: the front door's accounts and routes, the telemetry
// paths' devices (the change path's reload; also after sshd allocates a socket).
func (h *Hub) reloadAccess() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.access.Reload(ctx); err != nil {
		return err
	}
	var err error
	if h.accounts != nil {
		// Accounts first: the telemetry paths check their clients against them.
		err = h.accounts.Reload(ctx)
	}
	if h.front != nil {
		h.front.DevicesChanged()
	}
	h.reloadTelemetry() // devices, secrets; MQTT clients of removed devices and accounts go
	return err
}
