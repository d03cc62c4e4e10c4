package access

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// Identity is a local caller as the kernel reports it.
type Identity struct {
	UID  uint32
	GIDs []uint32 // primary and supplementary groups
	Name string   // user name, or the uid as text when unknown
}

func (id Identity) String() string { return fmt.Sprintf("uid %d (%s)", id.UID, id.Name) }

// Policy is an immutable snapshot of the grants; the hub swaps in a new one on change.
type Policy struct {
	grants       []registry.Grant
	deviceGroups map[string][]string
	adminGID     int // -1: none
}

// NewPolicy builds a snapshot. adminGID < 0 means no admin group.
func NewPolicy(grants []registry.Grant, deviceGroups map[string][]string, adminGID int) *Policy {
	return &Policy{grants: grants, deviceGroups: deviceGroups, adminGID: adminGID}
}

// Superuser reports whether id may reach everything: root and the admin group can change
// the rules anyway.
func (p *Policy) Superuser(id Identity) bool {
	return id.UID == 0 || p.adminGID >= 0 && slices.Contains(id.GIDs, uint32(p.adminGID))
}

// Allowed reports whether id may reach device/alias.
func (p *Policy) Allowed(id Identity, device, alias string) bool {
	if p.Superuser(id) {
		return true
	}
	for _, g := range p.grants {
		if !covers(g.Alias, alias) {
			continue
		}
		if !p.targets(g.Target, device) {
			continue
		}
		switch g.Kind {
		case registry.PrincipalUser:
			if g.XID == id.UID {
				return true
			}
		case registry.PrincipalGroup:
			if slices.Contains(id.GIDs, g.XID) {
				return true
			}
		}
	}
	return false
}

// AllowedAccount reports whether front-door account id may reach device/alias. Accounts
// have no superusers: every device an account reaches is granted explicitly.
func (p *Policy) AllowedAccount(id int64, device, alias string) bool {
	for _, g := range p.grants {
		if g.Kind == registry.PrincipalAccount && int64(g.XID) == id && covers(g.Alias, alias) && p.targets(g.Target, device) {
			return true
		}
	}
	return false
}

// AllowedAccountIn is AllowedAccount for device as if it were in groups (and only
// them): whether an account may register a device into a network, or move one there,
// and still hold right on it.
func (p *Policy) AllowedAccountIn(id int64, device string, groups []string, right string) bool {
	for _, g := range p.grants {
		if g.Kind != registry.PrincipalAccount || int64(g.XID) != id || !covers(g.Alias, right) {
			continue
		}
		grp, isGroup := strings.CutPrefix(g.Target, "@")
		switch {
		case g.Target == registry.AllDevices, !isGroup && g.Target == device, isGroup && slices.Contains(groups, grp):
			return true
		}
	}
	return false
}

// AllowedAccountAll reports whether account id holds right on every device (a grant to
// @all): what making and removing networks and device types takes.
func (p *Policy) AllowedAccountAll(id int64, right string) bool {
	for _, g := range p.grants {
		if g.Kind == registry.PrincipalAccount && int64(g.XID) == id && g.Target == registry.AllDevices && covers(g.Alias, right) {
			return true
		}
	}
	return false
}

// HoldsAnywhere reports whether account id holds right on any device or group (or
// @all): whether it may ask to register a device at all.
func (p *Policy) HoldsAnywhere(id int64, right string) bool {
	for _, g := range p.grants {
		if g.Kind == registry.PrincipalAccount && int64(g.XID) == id && covers(g.Alias, right) {
			return true
		}
	}
	return false
}

// ScopeOf is what account id holds right on: every device (a grant to @all), or the
// devices and device groups its grants name.
func (p *Policy) ScopeOf(id int64, right string) (all bool, names, groups []string) {
	for _, g := range p.grants {
		if g.Kind != registry.PrincipalAccount || int64(g.XID) != id || !covers(g.Alias, right) {
			continue
		}
		switch grp, isGroup := strings.CutPrefix(g.Target, "@"); {
		case g.Target == registry.AllDevices:
			return true, nil, nil
		case isGroup:
			groups = append(groups, grp)
		default:
			names = append(names, g.Target)
		}
	}
	return false, names, groups
}

// GrantsOn are the grants that cover device (to it, a group of it, or @all).
func (p *Policy) GrantsOn(device string) []registry.Grant {
	var out []registry.Grant
	for _, g := range p.grants {
		if p.targets(g.Target, device) {
			out = append(out, g)
		}
	}
	return out
}

// NamesGroup reports whether account id holds a grant naming @group or @all: a network
// or device type it is told about even with no device in it yet.
func (p *Policy) NamesGroup(id int64, group string) bool {
	for _, g := range p.grants {
		if g.Kind == registry.PrincipalAccount && int64(g.XID) == id && (g.Target == "@"+group || g.Target == registry.AllDevices) {
			return true
		}
	}
	return false
}

// covers reports whether a grant of granted (an alias, '*' or a right) covers want: '*'
// covers every service but no right, and RightManage includes RightTelemetry and
// RightCommand.
func covers(granted, want string) bool {
	switch {
	case granted == want:
		return true
	case granted == "*":
		return !registry.IsRight(want)
	}
	return slices.Contains(implied[granted], want)
}

// implied are the rights a right includes.
var implied = map[string][]string{
	registry.RightManage:  {registry.RightTelemetry, registry.RightCommand},
	registry.RightView:    {registry.RightTelemetry},
	registry.RightOperate: {registry.RightView, registry.RightTelemetry, registry.RightCommand},
	registry.RightAdmin:   {registry.RightOperate, registry.RightView, registry.RightTelemetry, registry.RightCommand, registry.RightManage},
}

// DevicesWithRight lists the devices among all on which account id holds right.
func (p *Policy) DevicesWithRight(id int64, right string, all []string) []string {
	out := []string{}
	for _, d := range all {
		if p.AllowedAccount(id, d, right) {
			out = append(out, d)
		}
	}
	return out
}

// VisibleToAccount reports whether account id holds any grant on device: devices an
// account may not see are answered as if they did not exist.
func (p *Policy) VisibleToAccount(id int64, device string) bool {
	for _, g := range p.grants {
		if g.Kind == registry.PrincipalAccount && int64(g.XID) == id && p.targets(g.Target, device) {
			return true
		}
	}
	return false
}

func (p *Policy) targets(target, device string) bool {
	if target == registry.AllDevices {
		return true
	}
	if grp, ok := strings.CutPrefix(target, "@"); ok {
		return slices.Contains(p.deviceGroups[device], grp)
	}
	return target == device
}

// AdminGID returns the admin group's gid, or -1.
func (p *Policy) AdminGID() int { return p.adminGID }

// GrantsFor returns the grants that cover device/alias (the kernel layer compiles them).
func (p *Policy) GrantsFor(device, alias string) []registry.Grant {
	var out []registry.Grant
	for _, g := range p.grants {
		if covers(g.Alias, alias) && p.targets(g.Target, device) {
			out = append(out, g)
		}
	}
	return out
}

// Grants returns the snapshot's grants.
func (p *Policy) Grants() []registry.Grant { return p.grants }

// DeviceGroups returns the snapshot's device groups.
func (p *Policy) DeviceGroups() map[string][]string { return p.deviceGroups }

// Identities resolves uids to their groups through the system's user database, caching
// each answer for a short while (group changes take effect within ttl).
type Identities struct {
	ttl   time.Duration
	mu    sync.Mutex
	cache map[uint32]cached
}

type cached struct {
	id  Identity
	exp time.Time
}

// NewIdentities caches lookups for ttl (0 means 30s).
func NewIdentities(ttl time.Duration) *Identities {
	if ttl == 0 {
		ttl = 30 * time.Second
	}
	return &Identities{ttl: ttl, cache: map[uint32]cached{}}
}

// Lookup returns uid's identity. gid, when known from the kernel (SO_PEERCRED), is added
// to the groups: it is the caller's effective group, which may not be in the database.
func (c *Identities) Lookup(uid uint32, gid *uint32) Identity {
	c.mu.Lock()
	e, ok := c.cache[uid]
	c.mu.Unlock()
	if !ok || time.Now().After(e.exp) {
		e = cached{id: lookup(uid), exp: time.Now().Add(c.ttl)}
		c.mu.Lock()
		if len(c.cache) > 4096 {
			clear(c.cache)
		}
		c.cache[uid] = e
		c.mu.Unlock()
	}
	id := e.id
	if gid != nil && !slices.Contains(id.GIDs, *gid) {
		id.GIDs = append(slices.Clone(id.GIDs), *gid)
	}
	return id
}

func lookup(uid uint32) Identity {
	id := Identity{UID: uid, Name: strconv.FormatUint(uint64(uid), 10)}
	u, err := user.LookupId(id.Name)
	if err != nil {
		return id
	}
	id.Name = u.Username
	gids, _ := u.GroupIds()
	if !slices.Contains(gids, u.Gid) {
		gids = append(gids, u.Gid)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			id.GIDs = append(id.GIDs, uint32(n))
		}
	}
	return id
}

// LookupProcess is Lookup for a caller known by SO_PEERCRED: the process's own group
// list (from /proc) is added, so supplementary groups count even when the user
// database does not list them.
func (c *Identities) LookupProcess(uid, gid uint32, pid int32) Identity {
	id := c.Lookup(uid, &gid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return id
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if n, err := strconv.ParseUint(f, 10, 32); err == nil && !slices.Contains(id.GIDs, uint32(n)) {
				id.GIDs = append(id.GIDs, uint32(n))
			}
		}
	}
	return id
}
