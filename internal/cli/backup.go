package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/backup"
	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

func backupCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "backup DIR",
		Short: "Copy the data folder (registry, notifications, keys, CA, config) into a new folder, with the hub running",
		Long: `Copies the hub's data folder into DIR, a new or empty folder outside it, while the hub
runs: the registry and the notifications as consistent snapshots of SQLite, the host
keys, the REST API's signing keys, the local CA and hub.yaml as they are, with their
modes (DIR is 0700). The MQTT broker's sessions and the bridge's queue are included when
no hub holds them (stop the hub for them). backup.json, written last, lists every file
with its SHA-256: 'iotsafe restore --check DIR' verifies a backup, 'iotsafe restore DIR'
puts it back.

A registry in PostgreSQL is not copied (back it up with pg_dump); the rest of the data
folder is. A config file given with --config outside the data folder is not copied
either: keep it with your configuration management.`,
		Example: `  iotsafe backup /var/backups/iotsafe/$(date +%F)
  iotsafe restore --check /var/backups/iotsafe/2026-11-25`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			o := backup.Options{Version: Version, Lock: hub.LockName, Progress: progressTo(cmd.ErrOrStderr()), KeepFree: int64(cfg.Audit.MinFreeMiB) << 20,
				Skip: g.runningHubFiles()}
			loc := cfg.RegistryLocation(g.data)
			if sqldb.IsDSN(loc) {
				o.Database = sqldb.Redact(loc)
			}
			m, err := backup.Take(cmd.Context(), g.data, args[0], o)
			if err != nil {
				return err
			}
			abs, _ := filepath.Abs(args[0])
			// Named after the hub whose data folder this is: on a registry several hubs
			// share, each hub's backup age is its own.
			g.recordEvent(cmd, registry.Event{Kind: registry.EventBackup, Hub: cfg.HubName(),
				Detail: fmt.Sprintf("into %s: %s of %s", abs, describe(m), m.DataDir)})
			if outFmt.structured() {
				return outFmt.print(cmd.OutOrStdout(), m)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "backup of %s in %s: %s\n", m.DataDir, args[0], describe(m))
			for _, l := range m.LeftOut {
				fmt.Fprintf(w, "  not included: %s: %s\n", l.Path, l.Why)
			}
			if m.Database != "" {
				fmt.Fprintf(w, "  not included: the registry and the notifications, in PostgreSQL (%s): back them up with pg_dump -Fc\n", m.Database)
			}
			if g.config != "" && !inside(g.config, g.data) {
				fmt.Fprintf(w, "  not included: the config file %s, outside the data folder\n", g.config)
			}
			return nil
		},
	}
	outFmt = addOutput(c)
	return c
}

func restoreCmd(g *globals) *cobra.Command {
	var force, check bool
	var outFmt *output
	c := &cobra.Command{
		Use:   "restore DIR",
		Short: "Put a backup back into the data folder (the hub must be stopped); --check only verifies it",
		Long: `Checks every file of the backup in DIR against its manifest, then puts them into the
data folder. The hub must be stopped (restore takes the data folder's lock). A data
folder that holds anything is replaced only with --force, and what it held is moved to
a sibling folder DATA.replaced-TIME first, not deleted.

What changed after the backup is lost, with one exception: when the replaced data
folder had a registry, every device it had revoked or removed, and every key it had
revoked, is revoked in the restored registry too, so a restore never lets a key back
in that was shut out. Devices enrolled after the backup are listed: enroll them again.
Gateways send this hub, at their next session, what they relayed after the backup.`,
		Example: `  systemctl stop iotsafe
  iotsafe restore --force /var/backups/iotsafe/2026-11-25
  systemctl start iotsafe`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			if check {
				m, err := backup.Verify(args[0])
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(w, m)
				}
				fmt.Fprintf(w, "%s is a whole backup of %s, taken %s: %s\n", args[0], m.DataDir, m.Created.Format(time.RFC3339), describe(m))
				return nil
			}
			lock, err := hub.LockData(g.data)
			if err != nil {
				return err
			}
			defer lock.Release()
			r, err := backup.Restore(args[0], g.data, backup.RestoreOptions{Lock: hub.LockName, Force: force, Progress: progressTo(cmd.ErrOrStderr()), Accept: restorable})
			if err != nil {
				return err
			}
			rep, err := g.afterRestore(cmd.Context(), r)
			if err != nil {
				aside := ""
				if r.Aside != "" {
					aside = " (the replaced data folder is in " + r.Aside + ")"
				}
				return fmt.Errorf("the backup's files are in place, but the restore did not finish: %w; revoke by hand what was revoked after the backup%s", err, aside)
			}
			if outFmt.structured() {
				return outFmt.print(w, rep)
			}
			fmt.Fprintf(w, "restored the backup of %s (%s) into %s: %s\n", r.Manifest.DataDir, r.Manifest.Created.Format(time.RFC3339), g.data, describe(r.Manifest))
			if r.Aside != "" {
				fmt.Fprintf(w, "what the data folder held is in %s\n", r.Aside)
			}
			for _, c := range rep.Carried {
				fmt.Fprintf(w, "  revoked again: %s\n", c)
			}
			if rep.IDsSkipped > 0 {
				fmt.Fprintf(w, "  notification ids go on %d further, past any the hub may have given since the backup\n", rep.IDsSkipped)
			}
			if len(rep.Newer) > 0 {
				fmt.Fprintf(w, "  not in the backup, enrolled after it (enroll them again): %s\n", strings.Join(rep.Newer, ", "))
			}
			if r.Manifest.Database != "" {
				fmt.Fprintf(w, "  the registry and the notifications are in PostgreSQL (%s): restore them there (pg_restore)\n", r.Manifest.Database)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "replace a data folder that holds anything (moved aside first)")
	c.Flags().BoolVar(&check, "check", false, "only verify the backup: every file present and unchanged")
	outFmt = addOutput(c)
	return c
}

// restorable refuses, before anything is touched, a backup whose databases are of a
// schema newer than this iotsafe knows (it could not open them).
func restorable(m *backup.Manifest) error {
	known := map[string]int{registry.FileName: registry.SchemaVersion(), telemetry.FileName: telemetry.SchemaVersion()}
	for _, f := range m.Files {
		if v, ok := known[f.Path]; ok && f.SchemaVersion > v {
			return fmt.Errorf("the backup's %s is at schema version %d, newer than this iotsafe's %d: restore it with the iotsafe that took it (%s)", f.Path, f.SchemaVersion, v, m.Version)
		}
	}
	return nil
}

// restoreReport is what the restore did beyond copying files.
type restoreReport struct {
	backup.Restored
	// Carried are the revocations of the replaced registry applied to the restored one.
	Carried []string `json:"carried,omitempty"`
	// Newer are devices of the replaced registry the backup does not have.
	Newer []string `json:"enrolled_after,omitempty"`
	// IDsSkipped is how far the restored notification store moved its next id.
	IDsSkipped int64 `json:"notification_ids_skipped,omitempty"`
}

// idGap is more ids than a hub can give in d: a million a second (ten times the
// fastest store measured here), and at least 2^32.
func idGap(d time.Duration) int64 {
	return max(1<<32, int64(d/time.Second+1)*1_000_000)
}

// afterRestore opens the restored registry (bringing its schema up to this iotsafe's,
// or refusing a newer one) and carries the replaced registry's revocations into it.
func (g *globals) afterRestore(ctx context.Context, r *backup.Restored) (restoreReport, error) {
	rep := restoreReport{Restored: *r}
	cfg, err := g.loadConfig()
	if err != nil {
		return rep, err
	}
	loc := cfg.RegistryLocation(g.data)
	restored, err := registry.Open(ctx, loc, cfg.Pool)
	if err != nil {
		return rep, fmt.Errorf("the restored registry: %w", err)
	}
	defer restored.Close()
	// Notification ids are never given twice: the restored store skips every id the
	// hub may have given since the backup.
	gap := idGap(time.Since(r.Manifest.Created))
	if moved, err := telemetry.SkipIDs(ctx, loc, gap); err != nil {
		return rep, err
	} else if moved {
		rep.IDsSkipped = gap
	}
	// The replaced folder's own registry, if it had one, knows what was revoked since.
	if r.Aside != "" && !sqldb.IsDSN(loc) && fileExists(filepath.Join(r.Aside, registry.FileName)) {
		replaced, done, err := openCopy(ctx, r.Aside)
		if err != nil {
			return rep, fmt.Errorf("reading the replaced registry in %s for its revocations (revoke what it had revoked by hand): %w", r.Aside, err)
		}
		defer done()
		if rep.Carried, rep.Newer, err = carryRevocations(ctx, replaced, restored, r.Manifest.Created); err != nil {
			return rep, err
		}
	}
	detail := fmt.Sprintf("the backup of %s taken %s (iotsafe %s): %s; revoked again: %d", r.Manifest.DataDir,
		r.Manifest.Created.Format(time.RFC3339), r.Manifest.Version, describe(r.Manifest), len(rep.Carried))
	if r.Aside != "" {
		detail += "; the data folder's former content is in " + r.Aside
	}
	return rep, restored.AddEvent(ctx, registry.Event{Kind: registry.EventRestored, Detail: detail})
}

// openCopy opens a snapshot of the SQLite registry in dir, so that bringing an older
// schema up to this iotsafe's changes nothing in dir: what a restore moved aside stays
// at the schema the hub left it, for an operator who goes back to the older iotsafe.
// done closes the snapshot and deletes it.
func openCopy(ctx context.Context, dir string) (reg *registry.Registry, done func(), err error) {
	tmp, err := os.MkdirTemp("", "iotsafe-replaced-registry-")
	if err != nil {
		return nil, nil, err
	}
	snap := filepath.Join(tmp, registry.FileName)
	if _, err = backup.SnapshotSQLite(ctx, filepath.Join(dir, registry.FileName), snap); err == nil {
		err = os.Chmod(snap, 0o600) // the registry refuses a file others may read
	}
	if err == nil {
		reg, err = registry.Open(ctx, tmp, sockets.Config{})
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	return reg, func() { reg.Close(); os.RemoveAll(tmp) }, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// recordEvent writes e into the registry's audit log; a registry that cannot take it
// gets a warning, not a failed command (the backup is made).
// runningHubFiles are the files of the data folder that describe the running hub's
// process rather than the hub's state: its ready file, if it writes one there.
func (g *globals) runningHubFiles() map[string]string {
	rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpInfo})
	if err != nil || rep.Hub == nil || rep.Hub.ReadyFile == "" {
		return nil
	}
	data, err := filepath.Abs(g.data)
	if err != nil {
		return nil
	}
	rel, err := filepath.Rel(data, rep.Hub.ReadyFile)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil
	}
	return map[string]string{filepath.ToSlash(rel): "the running hub's ready file (it describes that process; the hub writes it again at each start)"}
}

func (g *globals) recordEvent(cmd *cobra.Command, e registry.Event) {
	err := g.withRegistry(cmd, func(reg *registry.Registry) error { return reg.AddEvent(cmd.Context(), e) })
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the audit log did not record the %s: %v\n", e.Kind, err)
	}
}

// carryRevocations revokes in restored every device and key that replaced has revoked
// and restored has not, and every device replaced's audit log says was removed after
// the backup was taken (a registry that merely lacks a device, a fresh one, removes
// nothing); it returns what it did, and the devices only replaced has.
func carryRevocations(ctx context.Context, replaced, restored *registry.Registry, taken time.Time) (carried, newer []string, err error) {
	before, err := replaced.Devices(ctx)
	if err != nil {
		return nil, nil, err
	}
	after, err := restored.Devices(ctx)
	if err != nil {
		return nil, nil, err
	}
	removed := map[string]bool{}
	for from := int64(0); ; {
		evs, err := replaced.EventsAfter(ctx, registry.EventDeviceRemoved, from, 1000)
		if err != nil {
			return nil, nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			removed[e.Device] = e.At.After(taken)
		}
		from = evs[len(evs)-1].ID
	}
	was := map[string]*registry.Device{}
	for _, d := range before {
		was[d.Name] = d
	}
	ctl := control.New(restored, nil)
	revoke := func(ch control.Change, what string) error {
		if _, err := ctl.Apply(ctx, ch); err != nil {
			return err
		}
		carried = append(carried, what)
		return nil
	}
	for _, d := range after {
		old, ok := was[d.Name]
		delete(was, d.Name)
		switch {
		case d.Revoked():
		case !ok && removed[d.Name]:
			err = revoke(control.RevokeDevice{Device: d.Name, Reason: "removed after the backup this registry was restored from"}, d.Name+" (removed after the backup)")
		case !ok:
		case old.Revoked():
			why := "revoked after the backup this registry was restored from"
			if old.RevokeWhy != "" {
				why += ": " + old.RevokeWhy
			}
			err = revoke(control.RevokeDevice{Device: d.Name, Reason: why}, d.Name+" (revoked after the backup)")
		default:
			for _, k := range old.Keys {
				if err == nil && k.RevokedAt != nil && hasLiveKey(d, k.Fingerprint) {
					err = revoke(control.RevokeKey{Device: d.Name, Fingerprint: k.Fingerprint}, d.Name+" key "+k.Fingerprint)
				}
			}
		}
		if err != nil {
			return carried, newer, err
		}
	}
	for name := range was {
		newer = append(newer, name)
	}
	slices.Sort(newer)
	return carried, newer, nil
}

func hasLiveKey(d *registry.Device, fp string) bool {
	for _, k := range d.Keys {
		if k.Fingerprint == fp && k.RevokedAt == nil {
			return true
		}
	}
	return false
}

// describe is a manifest in a few words.
func describe(m *backup.Manifest) string {
	var total int64
	var schema []string
	for _, f := range m.Files {
		total += f.Size
		if f.How == backup.HowSQLite && f.SchemaVersion > 0 {
			schema = append(schema, fmt.Sprintf("%s at schema version %d", f.Path, f.SchemaVersion))
		}
	}
	s := fmt.Sprintf("%d files, %s", len(m.Files), bytesize.Format(total))
	if len(schema) > 0 {
		s += " (" + strings.Join(schema, ", ") + ")"
	}
	return s
}

// inside reports whether path is in dir.
func inside(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	r, err := filepath.Rel(d, p)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

// progressTo writes each step as a line to w.
func progressTo(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
}
