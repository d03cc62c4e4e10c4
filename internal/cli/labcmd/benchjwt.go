package labcmd

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/jwtbench"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

func benchJWTCmd() *cobra.Command {
	var o jwtbench.Options
	var out, algs, transports, profile string
	c := &cobra.Command{
		Use:   "jwt",
		Short: "Telemetry benchmark (paper 004): devices posting notifications with JWT, by load, algorithm and transport",
		Long: `Reproduce paper 004's experiment: N simulated devices (goroutines in a simulator
process, each with its own connection) log in to the hub's DeviceHive-compatible REST API,
then post notifications carrying a random 36-byte UUID, renew their 30 s access token when
it expires and drop their connection and log in again every U(10 s, 1440 s). The sweep
runs N up (by default until each transport is past its knee) for each token algorithm
(none, HS256, HS384, HS512) and each transport:

  https      one keep-alive TLS connection per device (the paper)
  https-new  a new TLS connection per request (TLS session resumed)
  ssh        the device's SSH session: plain HTTP over a direct forward, no token

Closed loop by default, as the paper (each device sends as soon as it has the previous
answer); --rate sends that many notifications per second per device instead, and counts
the client time from the planned send time. The hub's own histograms split each token's
processing from its signature check (iotsafe_jwt_verify_seconds and
iotsafe_jwt_signature_seconds); the bench reads them over each measured window.

The hub keeps its registry and notifications in its data folder (SQLite) by default;
--store postgres puts both in a PostgreSQL database: a scratch server the lab starts on
this machine (PostgreSQL's own durability settings), or --registry DSN, an empty database
of yours (the lab enrolls its devices there and empties its notifications before each
start of the hub). With the scratch server the server's CPU time is measured too.

Results go to --out (default ./bench-results/jwt-TIMESTAMP/): runs.csv, points.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html with figs. 2-6
and tables 1-3 beside the paper's values. --quick checks the harness in under a minute;
its figures are not measurements.`,
		Example: `  iotsafe bench jwt --quick
  iotsafe bench jwt --transports https --algs none,HS512 --devices 640,1280,2560 --reps 3
  iotsafe bench jwt --rate 1 --transports https --algs HS256 --devices 12800
  iotsafe bench jwt --rate 1 --transports https --algs HS256 --devices 12800 --prefill 100 --store postgres`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkJWTOptions(&o, algs, transports); err != nil {
				return err
			}
			return runLab(cmd, "jwt", out, profile, func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return jwtbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "5 devices, one second per point: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/jwt-TIMESTAMP)")
	fl.StringVar(&algs, "algs", "", "comma-separated token algorithms: "+strings.Join(jwtbench.Algorithms, ", ")+" (default all)")
	fl.StringVar(&transports, "transports", "", "comma-separated: "+strings.Join(jwtbench.Transports, ", ")+" (default all)")
	fl.IntSliceVar(&o.Devices, "devices", nil, "the N to run, every one (default: 160 up to past each transport's knee)")
	fl.Float64Var(&o.Rate, "rate", 0, "notifications per second per device (default 0: closed loop, as the paper)")
	fl.IntVar(&o.Reps, "reps", 0, "repetitions per point, medians reported (default 1; the paper: 5)")
	fl.DurationVar(&o.Warmup, "warmup", 0, "after every device logged in, before measuring (default 5s)")
	fl.DurationVar(&o.Duration, "duration", 0, "measured window per point (default 20s; the paper: 600s)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "per request: longer is incomplete (default 10s)")
	fl.DurationVar(&o.DisconnectMin, "disconnect-min", 0, "a device drops its connection after U(min,max) (default 10s)")
	fl.DurationVar(&o.DisconnectMax, "disconnect-max", 0, "(default 1440s, the paper's)")
	fl.IntVar(&o.Prefill, "prefill", 0, "notifications per device stored before each start of the hub: a store of a size in service (default 0: empty)")
	fl.StringVar(&o.Store, "store", "", "where the hub keeps registry and notifications: "+strings.Join(jwtbench.Stores, ", ")+" (default sqlite; postgres with --registry)")
	fl.StringVar(&o.DSN, "registry", "", "with --store postgres: an EMPTY PostgreSQL database (postgres://...) instead of a scratch server; the lab fills it")
	fl.StringVar(&profile, "profile", "", "write CPU profiles into DIR (go tool pprof): each hub start and each simulator run")
	return c
}

// checkJWTOptions reads --algs and --transports into o and checks the other flags.
func checkJWTOptions(o *jwtbench.Options, algs, transports string) error {
	var err error
	if o.Algs, err = list("--algs", algs, jwtbench.Algorithms); err != nil {
		return err
	}
	if o.Transports, err = list("--transports", transports, jwtbench.Transports); err != nil {
		return err
	}
	for _, n := range o.Devices {
		if n < 1 || n > 65000 {
			return fmt.Errorf("--devices: %d is out of range 1..65000 (each device has its own loopback address)", n)
		}
	}
	if o.Rate < 0 {
		return fmt.Errorf("--rate: %v is negative", o.Rate)
	}
	if o.Prefill < 0 {
		return fmt.Errorf("--prefill: %d is negative", o.Prefill)
	}
	if o.Store != "" && !slices.Contains(jwtbench.Stores, o.Store) {
		return fmt.Errorf("--store: %q is not one of %s", o.Store, strings.Join(jwtbench.Stores, ", "))
	}
	if o.DSN != "" {
		if !sqldb.IsDSN(o.DSN) {
			return fmt.Errorf("--registry: %q is not a postgres:// URL", o.DSN)
		}
		if o.Store == jwtbench.StoreSQLite {
			return fmt.Errorf("--registry is a PostgreSQL database: it goes with --store postgres, not sqlite")
		}
	}
	if o.DisconnectMax < o.DisconnectMin {
		return fmt.Errorf("--disconnect-max %v is below --disconnect-min %v", o.DisconnectMax, o.DisconnectMin)
	}
	return nil
}

// list parses a comma-separated flag whose values come from allowed, kept in allowed's
// order; nil if the flag is empty (meaning all).
func list(flag, v string, allowed []string) ([]string, error) {
	set, err := choices(flag, v, allowed)
	if set == nil || err != nil {
		return nil, err
	}
	var out []string
	for _, a := range allowed {
		if set[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

func benchJWTSimCmd() *cobra.Command {
	var sc jwtbench.SimConfig
	var sources string
	c := &cobra.Command{
		Use: "jwt-sim", Hidden: true, Short: "lab helper: the simulated devices of 'bench jwt'", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sources != "" {
				p, err := netip.ParsePrefix(sources)
				if err != nil {
					return fmt.Errorf("--sources: %w", err)
				}
				sc.Sources = p
			}
			return jwtbench.RunSim(cmd.Context(), sc, cmd.OutOrStdout())
		},
	}
	fl := c.Flags()
	fl.StringVar(&sc.Transport, "transport", jwtbench.HTTPS, strings.Join(jwtbench.Transports, ", "))
	fl.StringVar(&sc.Addr, "addr", "", "the front door (https*) or the hub's SSH address (ssh)")
	fl.StringVar(&sc.Domain, "domain", lab.FrontdoorDomain, "the front door's domain")
	fl.StringVar(&sc.CAFile, "ca", "", "the front door's CA certificate (PEM)")
	fl.StringVar(&sc.Secrets, "secrets", "", "file of NAME SECRET lines")
	fl.StringVar(&sc.HostKey, "host-key", "", "the hub's public host key file (ssh)")
	fl.StringVar(&sc.KeyDir, "key-dir", "", "device private keys, one file per name (ssh)")
	fl.StringVar(&sc.Alias, "alias", "api", "the direct alias of the hub's plain REST listener (ssh)")
	fl.IntVar(&sc.Devices, "devices", 1, "simulated devices")
	fl.Float64Var(&sc.Rate, "rate", 0, "notifications per second per device; 0: closed loop")
	fl.DurationVar(&sc.Warmup, "warmup", 5*time.Second, "before the measured window")
	fl.DurationVar(&sc.Duration, "duration", 20*time.Second, "measured window")
	fl.DurationVar(&sc.Timeout, "timeout", 10*time.Second, "per request")
	fl.DurationVar(&sc.DisconnectMin, "disconnect-min", 0, "disconnect after U(min,max); 0 never")
	fl.DurationVar(&sc.DisconnectMax, "disconnect-max", 0, "")
	fl.IntVar(&sc.Parallel, "parallel", 64, "concurrent logins while starting")
	fl.StringVar(&sources, "sources", "", "CIDR of the devices' own source addresses (device i: base+i+1)")
	return c
}
