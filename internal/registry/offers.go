package registry

import (
	"context"
	"fmt"
)

// RecordOffer keeps a client's algorithm offer (JSON) under its hash, once.
func (r *Registry) RecordOffer(ctx context.Context, hash, offer string) error {
	if _, err := r.db.ExecContext(ctx, `INSERT INTO ssh_offers(hash, offer, first_seen) VALUES(?,?,?) ON CONFLICT DO NOTHING`, hash, offer, now()); err != nil {
		return fmt.Errorf("registry: record offer: %w", err)
	}
	return nil
}

// Offers are the recorded offers of these hashes (missing ones are left out).
func (r *Registry) Offers(ctx context.Context, hashes []string) (map[string]string, error) {
	out := map[string]string{}
	for start := 0; start < len(hashes); start += 500 {
		part := hashes[start:min(start+500, len(hashes))]
		args := make([]any, len(part))
		for i, h := range part {
			args[i] = h
		}
		rows, err := r.db.QueryContext(ctx, `SELECT hash, offer FROM ssh_offers WHERE hash IN (`+placeholders(len(part))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("registry: offers: %w", err)
		}
		for rows.Next() {
			var h, o string
			if err := rows.Scan(&h, &o); err != nil {
				rows.Close()
				return nil, err
			}
			out[h] = o
		}
		rows.Close()
	}
	return out, nil
}

// AlgoGroup is how many online devices negotiated the same algorithms with the same
// offer (a device's last_algos, as stored).
type AlgoGroup struct {
	Algos   string // JSON of Algorithms
	Devices int
}

// OnlineAlgorithms groups the online devices of scope by what their sessions
// negotiated and offered: a fleet of 100,000 devices is a few dozen groups.
func (r *Registry) OnlineAlgorithms(ctx context.Context, scope Scope) ([]AlgoGroup, error) {
	cond, args := scope.where()
	rows, err := r.db.QueryContext(ctx, `SELECT d.last_algos, count(*) FROM devices d WHERE `+cond+` AND d.hub<>'' AND d.revoked_at IS NULL
		GROUP BY d.last_algos ORDER BY count(*) DESC`, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: online algorithms: %w", err)
	}
	defer rows.Close()
	var out []AlgoGroup
	for rows.Next() {
		var g AlgoGroup
		if err := rows.Scan(&g.Algos, &g.Devices); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// OnlineWithAlgorithms names up to limit online devices of scope whose sessions
// negotiated and offered one of algos (AlgoGroup.Algos values), by name.
func (r *Registry) OnlineWithAlgorithms(ctx context.Context, scope Scope, algos []string, limit int) ([]string, error) {
	if len(algos) == 0 {
		return []string{}, nil
	}
	cond, args := scope.where()
	for _, a := range algos {
		args = append(args, a)
	}
	rows, err := r.db.QueryContext(ctx, `SELECT d.name FROM devices d WHERE `+cond+` AND d.hub<>'' AND d.revoked_at IS NULL
		AND d.last_algos IN (`+placeholders(len(algos))+`) ORDER BY d.name LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("registry: online devices by algorithms: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
