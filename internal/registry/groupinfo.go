package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// The kinds of device group DeviceHive's API names with numeric ids.
const (
	GroupNetwork    = "network"
	GroupDeviceType = "devicetype"
)

// ErrGroupNotEmpty refuses to remove a network or device type that still has devices.
var ErrGroupNotEmpty = errors.New("registry: not empty")

// Audit events of networks and device types.
const (
	EventGroupAdded   = "group_added"
	EventGroupRemoved = "group_removed"
)

// GroupKind is g's kind (GroupNetwork, GroupDeviceType), or "" for a plain group.
func GroupKind(g string) string {
	if kind, _, ok := strings.Cut(g, ":"); ok && (kind == GroupNetwork || kind == GroupDeviceType) {
		return kind
	}
	return ""
}

// GroupInfo is a network or device type: its group, DeviceHive's id and description.
type GroupInfo struct {
	Group       string `json:"group"` // network:NAME or devicetype:NAME
	Kind        string `json:"kind"`
	Name        string `json:"name"` // NAME
	ID          int64  `json:"id"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
}

// ensureGroupInfo makes g's row if g is a network or device type without one (its id
// the kind's next), and returns it; a plain group has none (zero GroupInfo).
func (r *Registry) ensureGroupInfo(ctx context.Context, tx *sqldb.Tx, g, description string) (GroupInfo, error) {
	kind := GroupKind(g)
	if kind == "" {
		return GroupInfo{}, nil
	}
	gi, err := groupInfo(ctx, tx, g)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return gi, err
	}
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM group_info WHERE kind=?`, kind).Scan(&last); err != nil {
		return gi, fmt.Errorf("registry: %s ids: %w", kind, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO group_info(grp, kind, id, description, created_at) VALUES(?,?,?,?,?)`,
		g, kind, last+1, description, now()); err != nil {
		return gi, fmt.Errorf("registry: %s: %w", g, err)
	}
	return groupInfo(ctx, tx, g)
}

// rowQuerier is a registry connection or transaction.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sqldb.Row
}

func groupInfo(ctx context.Context, q rowQuerier, g string) (GroupInfo, error) {
	gi := GroupInfo{Group: g}
	err := q.QueryRowContext(ctx, `SELECT kind, id, description, created_at FROM group_info WHERE grp=?`, g).Scan(&gi.Kind, &gi.ID, &gi.Description, &gi.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return gi, fmt.Errorf("%w: %s", ErrNotFound, g)
	}
	if err != nil {
		return gi, fmt.Errorf("registry: %s: %w", g, err)
	}
	_, gi.Name, _ = strings.Cut(g, ":")
	return gi, nil
}

// AddGroupInfo makes a network or device type (kind) named name with no device yet;
// ErrExists if it is there.
func (r *Registry) AddGroupInfo(ctx context.Context, kind, name, description string) (GroupInfo, error) {
	g := kind + ":" + name
	if (kind != GroupNetwork && kind != GroupDeviceType) || !profile.ValidName(name) {
		return GroupInfo{}, fmt.Errorf("registry: %s name %q: use lower-case letters, digits and '-' (at most 63)", kind, name)
	}
	if len(description) > 1024 {
		return GroupInfo{}, fmt.Errorf("registry: a %s's description is at most 1024 bytes", kind)
	}
	var gi GroupInfo
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := groupInfo(ctx, tx, g); err == nil {
			return fmt.Errorf("%w: %s %s", ErrExists, kind, name)
		}
		var err error
		if gi, err = r.ensureGroupInfo(ctx, tx, g, description); err != nil {
			return err
		}
		return r.addEvent(ctx, tx, Event{Kind: EventGroupAdded, Detail: fmt.Sprintf("%s (id %d)", g, gi.ID)})
	})
	return gi, err
}

// RemoveGroupInfo removes an empty network or device type; one with devices is refused
// (move them first: a removed network would leave grants to it covering nothing).
func (r *Registry) RemoveGroupInfo(ctx context.Context, g string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := groupInfo(ctx, tx, g); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM device_groups WHERE grp=?`, g).Scan(&n); err != nil {
			return fmt.Errorf("registry: %s: %w", g, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %s holds %d devices: move them out first ('iotsafe device set-groups')", ErrGroupNotEmpty, g, n)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM group_info WHERE grp=?`, g); err != nil {
			return fmt.Errorf("registry: %s: %w", g, err)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventGroupRemoved, Detail: g})
	})
}

// GroupInfo is the network or device type g (network:NAME, devicetype:NAME).
func (r *Registry) GroupInfo(ctx context.Context, g string) (GroupInfo, error) {
	return groupInfo(ctx, r.db, g)
}

// GroupInfos lists the networks or device types (kind), by id.
func (r *Registry) GroupInfos(ctx context.Context, kind string) ([]GroupInfo, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT grp, kind, id, description, created_at FROM group_info WHERE kind=? ORDER BY id`, kind)
	if err != nil {
		return nil, fmt.Errorf("registry: %ss: %w", kind, err)
	}
	defer rows.Close()
	out := []GroupInfo{}
	for rows.Next() {
		var gi GroupInfo
		if err := rows.Scan(&gi.Group, &gi.Kind, &gi.ID, &gi.Description, &gi.CreatedAt); err != nil {
			return nil, err
		}
		_, gi.Name, _ = strings.Cut(gi.Group, ":")
		out = append(out, gi)
	}
	return out, rows.Err()
}
