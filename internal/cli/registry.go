package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

func registryCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "registry",
		Short: "Where the registry is kept, and moving it between SQLite and PostgreSQL",
		Long: `The registry holds devices, keys, profiles, sockets, grants, accounts and the audit log.
It is an SQLite file in the data folder unless hub.yaml names a PostgreSQL database
(registry: {dsn: postgres://...}); every admin command uses the same one as the hub.`,
	}
	c.AddCommand(registryInfoCmd(g), registryMigrateCmd(g))
	return c
}

// registryInfoCmd is 'iotsafe registry info'.
func registryInfoCmd(g *globals) *cobra.Command {
	var outFmt *output
	info := &cobra.Command{
		Use: "info", Short: "Print where the registry is, its schema version, its rows per table and the notifications beside it", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, cfg, err := g.openRegistry(cmd.Context())
			if err != nil {
				return err
			}
			defer reg.Close()
			info, err := reg.Info(cmd.Context())
			if err != nil {
				return err
			}
			// The notification store is beside the registry (its database, or the data
			// folder's telemetry.db): counted with it, none if it was never made.
			ri := struct {
				registry.Info
				Notifications int `json:"notifications"`
			}{Info: info}
			if ri.Notifications, err = telemetry.Count(cmd.Context(), cfg.RegistryLocation(g.data)); err != nil {
				return err
			}
			if outFmt.structured() {
				return outFmt.print(cmd.OutOrStdout(), ri)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "registry  %s (%s), schema version %d\n", ri.Where, ri.Database, ri.Version)
			for _, name := range slices.Sorted(maps.Keys(ri.Hubs)) {
				hi := ri.Hubs[name]
				peer := "takes no peers"
				if hi.Addr != "" {
					peer = "peers at " + hi.Addr
				}
				fmt.Fprintf(w, "hub       %s serving (%s; %s)\n", name, hi.Holder, peer)
			}
			for _, t := range ri.Tables {
				fmt.Fprintf(w, "  %-15s %d\n", t.Table, t.Rows)
			}
			fmt.Fprintf(w, "  %-15s %d\n", "notifications", ri.Notifications)
			return nil
		},
	}
	outFmt = addOutput(info)
	return info
}

// registryMigrateCmd is 'iotsafe registry migrate'.
func registryMigrateCmd(g *globals) *cobra.Command {
	var from, to string
	var onlyNotes bool
	var migFmt *output
	migrate := &cobra.Command{
		Use:   "migrate --to postgres://... [--from DATA] [--notifications]",
		Short: "Copy the registry and the notifications to another database (SQLite to PostgreSQL, or back); the hub must be stopped",
		Long: `Copies every row of every registry table (devices, keys, profiles, sockets, grants,
accounts, tokens, login sessions, device secrets and data, certificates, SOAP keys, the
audit log) into a new, empty database, checks every table's count, and commits only then;
then the telemetry notifications, checked the same way. The source registry is left as
it was: keep it as a backup.

The destination is a postgres:// DSN (the database must exist and be empty; the schema is
created) or a new data folder. The source defaults to the registry the configuration
names. Stop the hub first: devices reconnect when it starts again with the new
registry.

On PostgreSQL the notifications are one store for every hub of the registry. Moving a
data folder there renames its telemetry.db to telemetry.db.moved (a backup the hub no
longer reads). Into an empty store notifications keep their ids; into one that already
holds some (--notifications: a hub's own file moved after its hubs started sharing a
store) they are appended with new ids and their timestamps.`,
		Example: `  iotsafe registry migrate --data /var/lib/iotsafe --to 'postgres://iotsafe@db.example/iotsafe?passfile=/etc/iotsafe/pgpass'
  then set in hub.yaml:  registry: {dsn: "postgres://iotsafe@db.example/iotsafe?passfile=/etc/iotsafe/pgpass"}
  iotsafe registry migrate --notifications --from /var/lib/iotsafe --to 'postgres://...'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return errors.New("--to is required: a postgres:// DSN, or a new data folder")
			}
			if from == "" {
				cfg, err := g.loadConfig()
				if err != nil {
					return err
				}
				from = cfg.RegistryLocation(g.data)
			}
			if show(from) == show(to) {
				return errors.New("--from and --to name the same place")
			}
			counts, err := migrateRegistry(cmd.Context(), from, to, onlyNotes, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if migFmt.structured() {
				return migFmt.print(cmd.OutOrStdout(), counts)
			}
			w := cmd.OutOrStdout()
			if onlyNotes {
				fmt.Fprintf(w, "moved %d notifications from %s to %s; the count checked\n", counts[0].Rows, show(from), show(to))
				return nil
			}
			total := 0
			for _, c := range counts {
				total += c.Rows
			}
			fmt.Fprintf(w, "moved %d rows in %d tables from %s to %s; every table's count checked\n", total, len(counts), show(from), show(to))
			if sqldb.IsDSN(to) {
				fmt.Fprintf(w, "next: set  registry: {dsn: %q}  in hub.yaml and start the hub; %s is left as it was\n", sqldb.Redact(to), show(from))
			} else {
				fmt.Fprintf(w, "next: remove registry.dsn from hub.yaml and start the hub with --data %s\n", to)
			}
			return nil
		},
	}
	migrate.Flags().StringVar(&to, "to", "", "destination: a postgres:// DSN or a new data folder")
	migrate.Flags().StringVar(&from, "from", "", "source: a data folder or a postgres:// DSN (default: the configured registry)")
	migFmt = addOutput(migrate)
	migrate.Flags().BoolVar(&onlyNotes, "notifications", false, "copy only the telemetry notifications (into an empty or a non-empty store)")
	return migrate
}

// show is a registry location for messages: never a password.
func show(location string) string {
	if sqldb.IsDSN(location) {
		return sqldb.Redact(location)
	}
	return location
}

// migrateRegistry copies the registry at from into the empty one at to, then the
// notifications (only those with onlyNotes), with no hub serving either, telling
// progress on w. The notifications are the last row of what it returns.
func migrateRegistry(ctx context.Context, from, to string, onlyNotes bool, w io.Writer) ([]registry.TableCount, error) {
	// No hub may serve from either end while the copy runs: a data folder's lock, or a
	// PostgreSQL registry's serving lease.
	for _, loc := range []string{from, to} {
		if sqldb.IsDSN(loc) {
			continue
		}
		_, err := os.Stat(registryFile(loc))
		switch {
		case loc == to && err == nil && !onlyNotes:
			return nil, fmt.Errorf("%s already holds a registry: migrate into a new folder", loc)
		case loc == from && err != nil:
			return nil, fmt.Errorf("%s holds no registry (%s): give the hub's data folder with --from or --data", loc, registry.FileName)
		}
		if loc == to {
			if err := os.MkdirAll(loc, 0o700); err != nil {
				return nil, err
			}
		}
		lock, err := hub.LockData(loc)
		if err != nil {
			return nil, fmt.Errorf("%w (stop the hub before moving its registry)", err)
		}
		defer lock.Release()
	}
	var out []registry.TableCount
	if !onlyNotes {
		counts, err := copyRegistry(ctx, from, to, w)
		if err != nil {
			return nil, err
		}
		out = counts
	}
	fmt.Fprintf(w, "copying notifications from %s to %s\n", show(from), show(to))
	res, err := telemetry.Copy(ctx, from, to, func(n int) { fmt.Fprintf(w, "  notifications   %d so far\n", n) })
	if err != nil {
		if !onlyNotes {
			err = fmt.Errorf("the registry was copied, the notifications were not (nothing of them written): %w; try them again alone with --notifications", err)
		}
		return nil, err
	}
	how := "ids kept"
	if !res.KeptIDs {
		how = "appended with new ids: the destination held notifications already"
	}
	fmt.Fprintf(w, "  %-15s %d rows (%s)\n", "notifications", res.Rows, how)
	if sqldb.IsDSN(to) && !sqldb.IsDSN(from) && res.Rows > 0 {
		if err := telemetry.RetireLocal(from); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "  %s/%s renamed %s%s: a backup; a hub on PostgreSQL reads the shared store\n", from, telemetry.FileName, telemetry.FileName, telemetry.MovedSuffix)
	}
	return append(out, registry.TableCount{Table: "notifications", Rows: res.Rows}), nil
}

// copyRegistry copies the registry's tables, holding both registries' maintenance
// leases (no hub of either may be serving).
func copyRegistry(ctx context.Context, from, to string, w io.Writer) ([]registry.TableCount, error) {
	src, err := registry.Open(ctx, from, sockets.Config{})
	if err != nil {
		return nil, err
	}
	defer src.Close()
	lease, err := src.LockMaintenance(ctx, commandHolder("registry migrate"))
	if err != nil {
		return nil, fmt.Errorf("%w (stop the hub before moving its registry)", err)
	}
	defer lease.Release()
	dst, err := registry.Open(ctx, to, src.Pool().Config())
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	dstLease, err := dst.LockMaintenance(ctx, commandHolder("registry migrate"))
	if err != nil {
		return nil, err
	}
	defer dstLease.Release()
	fmt.Fprintf(w, "copying %s to %s\n", show(from), show(to))
	counts, err := src.CopyTo(ctx, dst, func(c registry.TableCount) {
		fmt.Fprintf(w, "  %-15s %d rows\n", c.Table, c.Rows)
	})
	if err != nil {
		return nil, err
	}
	return counts, moveTokenKeys(ctx, from, to, src, dst, w)
}

// moveTokenKeys moves the REST API's token signing keys with the registry, so the
// tokens they signed stay valid: a data folder keeps them in jwt-keys.json, a
// PostgreSQL registry in a setting every hub of it shares (hub.TokenKeys).
func moveTokenKeys(ctx context.Context, from, to string, src, dst *registry.Registry, w io.Writer) error {
	switch {
	case !sqldb.IsDSN(from) && sqldb.IsDSN(to):
		b, err := authn.FileKeys(from).Read(ctx)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil {
			err = dst.SharedSecret(registry.KeyJWT).Create(ctx, b)
		}
		if err != nil {
			return fmt.Errorf("the registry was copied, its token signing keys were not: %w", err)
		}
		fmt.Fprintf(w, "  token signing keys of %s copied into the registry (every hub of it signs with them)\n", authn.FileKeys(from).Where())
	case sqldb.IsDSN(from) && !sqldb.IsDSN(to):
		b, err := src.SharedSecret(registry.KeyJWT).Read(ctx)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil {
			err = authn.FileKeys(to).Create(ctx, b)
		}
		if err == nil { // the folder's hub reads the file; no copy in registry.db
			err = dst.SharedSecret(registry.KeyJWT).Delete(ctx)
		}
		if err != nil {
			return fmt.Errorf("the registry was copied, its token signing keys were not: %w", err)
		}
		fmt.Fprintf(w, "  token signing keys written to %s\n", authn.FileKeys(to).Where())
	}
	return nil
}

// commandHolder names an admin command in a registry's serving lease.
func commandHolder(what string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("iotsafe %s on %s (pid %d)", what, host, os.Getpid())
}

func registryFile(dir string) string { return dir + "/" + registry.FileName }
