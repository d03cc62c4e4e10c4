package registry

import (
	"context"
	"fmt"
	"strings"
)

// Fleet queries: the operator console's pages of devices, filtered, sorted and paged in
// the database, and its counts, so a registry of 100,000 devices costs one page's rows.

// Device states as the console filters them.
const (
	StateOnline  = "online"
	StateOffline = "offline"
	StateRevoked = "revoked"
	StatePending = "pending" // joined or enrolled pending approval
)

// Scope is which devices a caller may see: all of them, or those named or in the groups
// named (a grant to a device or a group).
type Scope struct {
	All    bool
	Names  []string
	Groups []string
}

// where is the scope as a condition on devices d.
func (s Scope) where() (string, []any) {
	if s.All {
		return "1=1", nil
	}
	var conds []string
	var args []any
	if len(s.Names) > 0 {
		conds = append(conds, "d.name IN ("+placeholders(len(s.Names))+")")
		for _, n := range s.Names {
			args = append(args, n)
		}
	}
	if len(s.Groups) > 0 {
		conds = append(conds, "d.name IN (SELECT device FROM device_groups WHERE grp IN ("+placeholders(len(s.Groups))+"))")
		for _, g := range s.Groups {
			args = append(args, g)
		}
	}
	if len(conds) == 0 {
		return "1=0", nil
	}
	return "(" + strings.Join(conds, " OR ") + ")", args
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// FleetQuery is one page of the console's device list.
type FleetQuery struct {
	Scope   Scope
	Pattern string // a substring of the name ("" for any)
	State   string // StateOnline, StateOffline, StateRevoked, StatePending or "" for any
	Profile string
	Gateway string // devices behind this gateway
	Hub     string // devices whose session this hub holds
	Group   string
	Sort    string // "name" (default), "last_seen" (newest first), "-last_seen"
	Offset  int
	Limit   int // 0 means 50; at most 500
}

// FleetPage is a page of devices and how many match in all.
type FleetPage struct {
	Devices []*Device
	Total   int
}

// FleetDevices is one page of the devices matching q, without keys or sockets.
func (r *Registry) FleetDevices(ctx context.Context, q FleetQuery) (FleetPage, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	q.Limit = min(q.Limit, 500)
	conds, args := q.Scope.where()
	where := []string{conds}
	if q.Pattern != "" {
		where = append(where, "d.name LIKE ? ESCAPE '\\'")
		args = append(args, "%"+likeEscape(q.Pattern)+"%")
	}
	switch q.State {
	case "":
	case StateOnline:
		where = append(where, "d.hub<>'' AND d.revoked_at IS NULL")
	case StateOffline:
		where = append(where, "d.hub='' AND d.revoked_at IS NULL")
	case StateRevoked:
		where = append(where, "d.revoked_at IS NOT NULL AND d.revoke_why NOT LIKE ?")
		args = append(args, PendingReason+"%")
	case StatePending:
		where = append(where, "d.revoked_at IS NOT NULL AND d.revoke_why LIKE ?")
		args = append(args, PendingReason+"%")
	default:
		return FleetPage{}, fmt.Errorf("registry: device state %q: want online, offline, revoked or pending", q.State)
	}
	for _, f := range []struct{ col, v string }{{"d.profile", q.Profile}, {"d.via", q.Gateway}, {"d.hub", q.Hub}} {
		if f.v != "" {
			where = append(where, f.col+"=?")
			args = append(args, f.v)
		}
	}
	if q.Group != "" {
		where = append(where, "d.name IN (SELECT device FROM device_groups WHERE grp=?)")
		args = append(args, q.Group)
	}
	order := "d.name"
	switch q.Sort {
	case "", "name":
	case "last_seen":
		order = "CASE WHEN d.last_seen IS NULL THEN 1 ELSE 0 END, d.last_seen DESC, d.name"
	case "-last_seen":
		order = "CASE WHEN d.last_seen IS NULL THEN 0 ELSE 1 END, d.last_seen, d.name"
	default:
		return FleetPage{}, fmt.Errorf("registry: sort %q: want name, last_seen or -last_seen", q.Sort)
	}
	cond := strings.Join(where, " AND ")
	var page FleetPage
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM devices d WHERE `+cond, args...).Scan(&page.Total); err != nil {
		return page, fmt.Errorf("registry: fleet: %w", err)
	}
	rows, err := r.db.QueryContext(ctx, `SELECT `+deviceColsOfD+` FROM devices d WHERE `+cond+` ORDER BY `+order+` LIMIT ? OFFSET ?`,
		append(args, q.Limit, q.Offset)...)
	if err != nil {
		return page, fmt.Errorf("registry: fleet: %w", err)
	}
	defer rows.Close()
	page.Devices = []*Device{}
	for rows.Next() {
		d, err := scanDevice(rows)
		if err != nil {
			return page, err
		}
		d.Groups, d.Keys, d.Sockets = []string{}, []Key{}, []Socket{}
		page.Devices = append(page.Devices, d)
	}
	return page, rows.Err()
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// FleetCounts are the console's fleet at a glance.
type FleetCounts struct {
	Devices, Online, Offline, Revoked, Pending int
	// ByHub counts the devices whose session each hub holds; ByGateway the devices
	// behind each gateway.
	ByHub, ByGateway map[string]int
}

// Fleet counts the devices of scope by state, hub and gateway.
func (r *Registry) Fleet(ctx context.Context, scope Scope) (FleetCounts, error) {
	c := FleetCounts{ByHub: map[string]int{}, ByGateway: map[string]int{}}
	cond, args := scope.where()
	rows, err := r.db.QueryContext(ctx, `SELECT d.hub, d.via, CASE WHEN d.revoked_at IS NULL THEN 0 WHEN d.revoke_why LIKE ? THEN 2 ELSE 1 END, count(*)
		FROM devices d WHERE `+cond+` GROUP BY 1, 2, 3`, append([]any{PendingReason + "%"}, args...)...)
	if err != nil {
		return c, fmt.Errorf("registry: fleet counts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var hub, via string
		var revoked, n int
		if err := rows.Scan(&hub, &via, &revoked, &n); err != nil {
			return c, err
		}
		c.Devices += n
		switch {
		case revoked == 2:
			c.Pending += n
		case revoked == 1:
			c.Revoked += n
		case hub != "":
			c.Online += n
			c.ByHub[hub] += n
		default:
			c.Offline += n
		}
		if via != "" {
			c.ByGateway[via] += n
		}
	}
	return c, rows.Err()
}
