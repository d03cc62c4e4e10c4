package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Principal kinds of a grant.
const (
	PrincipalUser  = "user"
	PrincipalGroup = "group"
)

// EventAccessDenied is recorded when a local process is refused a device service.
const EventAccessDenied = "access_denied"

// Grant lets an operating-system user or group, or a front-door account, reach one
// service (or all, "*") of one device or of every device in a device group ("@name").
type Grant struct {
	ID     int64  `json:"id"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	XID    uint32 `json:"xid"` // uid or gid
	Target string `json:"target"`
	Alias  string `json:"alias"`
}

func (g Grant) String() string {
	return fmt.Sprintf("%s %s (%d) -> %s/%s", g.Kind, g.Name, g.XID, g.Target, g.Alias)
}

// Rights an account may hold on a device besides reaching its services; they are granted
// like aliases but '*' does not include them. They begin with '+', which no alias does.
const (
	// RightTelemetry reads the device's notifications and the commands it was sent
	// (REST query, poll, stream; MQTT subscriptions).
	RightTelemetry = "+telemetry"
	// RightCommand sends the device commands and reads them with their answers (REST),
	// and publishes to its MQTT topics.
	RightCommand = "+command"
	// RightManage includes RightTelemetry and RightCommand, and issues tokens for the
	// device, changes its data and removes it through the REST API.
	RightManage = "+manage"

	// The operator console's roles, as rights on the devices they cover (a grant to @all
	// covers the fleet). RightView sees the device in the console: its state, sessions,
	// crypto, grants, audit events and notifications (RightTelemetry included).
	RightView = "+view"
	// RightOperate includes RightView and RightCommand: revoke, reinstate, send commands.
	RightOperate = "+operate"
	// RightAdmin includes RightOperate and RightManage: remove devices and rotate their
	// secrets; on @all, also the console's accounts and policy pages.
	RightAdmin = "+admin"
)

// Rights are the rights, for help and errors.
var Rights = []string{RightTelemetry, RightCommand, RightManage, RightView, RightOperate, RightAdmin}

// IsRight reports whether alias names a right rather than a service.
func IsRight(alias string) bool { return slices.Contains(Rights, alias) }

// AllDevices is the grant target that covers every device, those enrolled later too.
const AllDevices = "@all"

// ValidTarget checks "device", "@group" (network:NAME and devicetype:NAME included) or
// AllDevices.
func ValidTarget(t string) bool {
	if g, ok := strings.CutPrefix(t, "@"); ok {
		return t == AllDevices || ValidGroup(g) == nil
	}
	return profile.ValidName(t)
}

// ValidGroup checks a device group's name: a device name's form, or network:NAME or
// devicetype:NAME (DeviceHive's networks and device types), and not "all" (the grant
// target AllDevices is every device).
func ValidGroup(g string) error {
	if g == strings.TrimPrefix(AllDevices, "@") {
		return fmt.Errorf("registry: device group %q is reserved: a grant to %s covers every device", g, AllDevices)
	}
	if kind, name, ok := strings.Cut(g, ":"); ok && (kind == GroupNetwork || kind == GroupDeviceType) && profile.ValidName(name) {
		return nil
	}
	if !profile.ValidName(g) {
		return fmt.Errorf("registry: device group %q: use lower-case letters, digits and '-' (network:NAME and devicetype:NAME for DeviceHive's networks and device types)", g)
	}
	return nil
}

// checkGroups checks a device's groups: each valid, and at most one network and one
// device type (DeviceHive's device has one of each).
func checkGroups(groups []string) error {
	seen := map[string]string{}
	for _, g := range groups {
		if err := ValidGroup(g); err != nil {
			return err
		}
		if kind := GroupKind(g); kind != "" {
			if other, ok := seen[kind]; ok && other != g {
				return fmt.Errorf("registry: device groups %s and %s: a device is in one %s at most", other, g, kind)
			}
			seen[kind] = g
		}
	}
	return nil
}

// AddGrant stores a grant; adding one that exists is not an error.
func (r *Registry) AddGrant(ctx context.Context, g Grant) error {
	if g.Kind != PrincipalUser && g.Kind != PrincipalGroup && g.Kind != PrincipalAccount {
		return fmt.Errorf("registry: grant kind %q", g.Kind)
	}
	if !ValidTarget(g.Target) {
		return fmt.Errorf("registry: grant target %q: want DEVICE or @DEVICEGROUP", g.Target)
	}
	switch {
	case IsRight(g.Alias):
		if g.Kind != PrincipalAccount {
			return fmt.Errorf("registry: %s is a right of front-door accounts (--account), not of local users or groups", g.Alias)
		}
	case g.Alias != "*" && !profile.ValidName(g.Alias):
		return fmt.Errorf("registry: grant alias %q: want an alias, '*' or a right (%s)", g.Alias, strings.Join(Rights, ", "))
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO grants(kind, name, xid, target, alias, created_at) VALUES(?,?,?,?,?,?)
			ON CONFLICT DO NOTHING`, g.Kind, g.Name, g.XID, g.Target, g.Alias, now()); err != nil {
			return fmt.Errorf("registry: add grant: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Device: strings.TrimPrefix(g.Target, "@"), Kind: "granted", Detail: g.String()})
	})
}

// RemoveGrant deletes a grant; it reports ErrNotFound if there was none.
func (r *Registry) RemoveGrant(ctx context.Context, g Grant) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM grants WHERE kind=? AND xid=? AND target=? AND alias=?`, g.Kind, g.XID, g.Target, g.Alias)
		if err != nil {
			return fmt.Errorf("registry: remove grant: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: grant %s", ErrNotFound, g)
		}
		return r.addEvent(ctx, tx, Event{Device: strings.TrimPrefix(g.Target, "@"), Kind: "ungranted", Detail: g.String()})
	})
}

// Grants lists all grants.
func (r *Registry) Grants(ctx context.Context) ([]Grant, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT id, kind, name, xid, target, alias FROM grants ORDER BY target, alias, kind, name`)
	if err != nil {
		return nil, fmt.Errorf("registry: grants: %w", err)
	}
	defer rows.Close()
	out := []Grant{}
	for rows.Next() {
		var g Grant
		if err := rows.Scan(&g.ID, &g.Kind, &g.Name, &g.XID, &g.Target, &g.Alias); err != nil {
			return nil, fmt.Errorf("registry: grants: %w", err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// SetDeviceGroups replaces the device groups a device belongs to.
func (r *Registry) SetDeviceGroups(ctx context.Context, device string, groups []string) error {
	if err := checkGroups(groups); err != nil {
		return err
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM device_groups WHERE device=?`, device); err != nil {
			return fmt.Errorf("registry: device groups: %w", err)
		}
		for _, g := range groups {
			if _, err := tx.ExecContext(ctx, `INSERT INTO device_groups(device, grp) VALUES(?,?) ON CONFLICT DO NOTHING`, device, g); err != nil {
				return fmt.Errorf("registry: device groups of %s: %w", device, err)
			}
			if _, err := r.ensureGroupInfo(ctx, tx, g, ""); err != nil {
				return err
			}
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: "groups_set", Detail: "device groups: " + strings.Join(groups, ", ")})
	})
}

// DeviceGroups maps each device to its groups.
func (r *Registry) DeviceGroups(ctx context.Context) (map[string][]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT device, grp FROM device_groups ORDER BY device, grp`)
	if err != nil {
		return nil, fmt.Errorf("registry: device groups: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var d, g string
		if err := rows.Scan(&d, &g); err != nil {
			return nil, err
		}
		out[d] = append(out[d], g)
	}
	return out, rows.Err()
}
