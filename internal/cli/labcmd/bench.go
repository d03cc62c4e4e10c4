package labcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/cpuprofile"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/devicebench"
	"github.com/iotsafe/iotsafe/internal/lab/hubbench"
	"github.com/iotsafe/iotsafe/internal/lab/linkbench"
	"github.com/iotsafe/iotsafe/internal/lab/registrybench"
	"github.com/iotsafe/iotsafe/internal/linkemu"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Command is 'iotsafe bench': every experiment of the lab and its hidden helpers.
func Command() *cobra.Command {
	var cpuProfile, logs string
	var stopProfile func()
	c := &cobra.Command{Use: "bench", Short: "The lab: reproduce the papers' experiments on this machine with real peers",
		// Every lab process (the load generator, fleets, applications) can profile itself,
		// so a path's whole cost can be read, not only the server's.
		PersistentPreRunE: func(*cobra.Command, []string) (err error) {
			if logs != "" {
				if err := lab.KeepLogs(logs); err != nil {
					return fmt.Errorf("--logs: %w", err)
				}
			}
			if cpuProfile != "" {
				stopProfile, err = cpuprofile.Start(cpuProfile)
			}
			return err
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if stopProfile != nil {
				stopProfile()
			}
		},
	}
	c.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of this process to FILE")
	_ = c.PersistentFlags().MarkHidden("cpuprofile")
	c.PersistentFlags().StringVar(&logs, "logs", "", "keep the whole log of every process the lab starts in DIR (NAME.log; hubs log at debug level) to find why a run failed")
	c.AddCommand(benchHubCmd(), benchDeviceCmd(), benchLinkCmd(), benchServeAppCmd(), benchServeHTTPSCmd(), benchFleetCmd(), benchWSSecCmd(),
		benchServeFilesCmd(), benchDeviceClientCmd(), benchJWTCmd(), benchJWTSimCmd(), benchOutageCmd(), benchChurnCmd(), benchMQTTCmd(), benchTLSCmd(), benchScaleCmd(), benchHubsCmd(), benchRelayCmd(), benchWebSocketCmd(), benchEnrolCmd(), benchConsoleCmd())
	return c
}

func benchHubCmd() *cobra.Command {
	var o hubbench.Options
	var ro registrybench.Options
	var out, only, profile, servers, paths string
	var size int
	c := &cobra.Command{
		Use:   "hub",
		Short: "Host-server benchmark (paper 000 section VII): requests per second and memory against OpenSSH, Dropbear, HTTPS",
		Long: `Reproduce paper 000's host-server benchmark on this machine: iotsafe's hub, OpenSSH's sshd,
Dropbear and HTTPS servers (Go, Caddy) each run as processes on free loopback ports with
generated configuration (never the system's services); a device-side fleet holds the
reverse forwards; one load generator makes 1 KB requests over new connections.

Results go to --out (default ./bench-results/hub-TIMESTAMP/): rps.csv, ram.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. Needs root for
sshd and dropbear; they are skipped, and said so, otherwise. --quick checks the harness in
under two minutes; its figures are not measurements.

The registry part compares the registry in SQLite with the registry in PostgreSQL in the
same run: admin operations per second and device sessions set up per second by a hub on
each. It runs with --registry DSN (an empty database of yours; the lab fills it) or with
--only registry (a scratch PostgreSQL server the lab starts and removes). Its files go to
registry/ in the results folder (alone: the folder itself).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Only, err = choices("--only", only, []string{"rps", "bulk", "ram", "inactive", "ps", "registry"}); err != nil {
				return err
			}
			withRegistry := o.Only["registry"] || ro.DSN != ""
			if ro.DSN != "" && !sqldb.IsDSN(ro.DSN) {
				return fmt.Errorf("--registry: %q is not a postgres:// URL", ro.DSN)
			}
			onlyRegistry := o.Only["registry"] && len(o.Only) == 1
			delete(o.Only, "registry")
			if o.Servers, err = choices("--servers", servers, []string{"iotsafe", "openssh", "dropbear"}); err != nil {
				return err
			}
			if o.Paths, err = choices("--paths", paths, hubbench.RPSPaths); err != nil {
				return err
			}
			return runLab(cmd, "hub", out, profile, func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress, b.Size = p, size
				return runHubBench(ctx, cmd, b, o, ro, out, p, onlyRegistry, withRegistry)
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "short runs to check the harness (under two minutes)")
	fl.StringVar(&ro.DSN, "registry", "", "registry part: an EMPTY PostgreSQL database (postgres://...) to compare with SQLite; the lab fills it")
	fl.IntVar(&ro.Devices, "registry-devices", 0, "registry part: device sessions per setup pass (default 1000, 50 with --quick)")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/hub-TIMESTAMP)")
	fl.StringVar(&only, "only", "", "comma-separated parts: rps, bulk (one large transfer per path), ram, inactive (fig. 17), ps (fig. 19), registry (SQLite against PostgreSQL); default all but registry (which --registry adds)")
	fl.IntVar(&o.BulkSize, "bulk-size", 0, "bytes of the bulk part's transfer (default 128 MiB, 4 MiB with --quick)")
	fl.IntVar(&o.Active, "active", 0, "fig. 17: active forwards (default 1000, 50 with --quick)")
	fl.IntSliceVar(&o.InactiveK, "inactive-k", nil, "fig. 17: inactive forwards (default 0,2000,4000,8000)")
	fl.IntVar(&o.Total, "ps-total", 0, "fig. 19: forwards spread over the sessions (default 2000, 100 with --quick)")
	fl.IntSliceVar(&o.PSSessions, "ps-sessions", nil, "fig. 19: session counts (default 1,10,100,1000,2000)")
	fl.IntVar(&o.Concurrency, "concurrency", 32, "concurrent clients of the load generator")
	fl.IntVar(&o.Reps, "reps", 0, "repetitions per path (default 5, 1 with --quick)")
	fl.DurationVar(&o.Duration, "duration", 0, "measured length of each run (default 5s, 2s with --quick)")
	fl.IntSliceVar(&o.RAMSizes, "ram-n", nil, "N for the memory scenario (default 100,1000; 20 with --quick)")
	fl.IntVar(&size, "size", 1024, "response body bytes")
	fl.StringVar(&paths, "paths", "", "comma-separated paths to measure (rps and bulk parts): "+strings.Join(hubbench.RPSPaths, ", ")+"; default all")
	fl.StringVar(&servers, "servers", "", "comma-separated SSH servers for ram, inactive, ps: iotsafe, openssh, dropbear; default all (10,000 OpenSSH sessions need ~16 GB)")
	fl.IntSliceVar(&o.Payloads, "payloads", nil, "response sizes in bytes of the memory-vs-payload sweep (default 1024,4096,16384,65536,262144)")
	fl.IntVar(&o.PayloadN, "payload-n", 0, "device sessions of the memory-vs-payload sweep (default 100, 10 with --quick)")
	fl.StringVar(&profile, "profile", "", "write CPU profiles into DIR (go tool pprof): every hub under test, fleet and application, and this process (the load generator)")
	return c
}

// runHubBench runs bench hub's parts: the servers' (hubbench) unless only the registry
// part was asked for, then the registry part (registrybench) when asked for.
func runHubBench(ctx context.Context, cmd *cobra.Command, b *lab.Bench, o hubbench.Options, ro registrybench.Options, out string, p *lab.Progress, onlyRegistry, withRegistry bool) error {
	if b.ProfileDir != "" {
		// This process is the load generator during the rps part.
		stop, err := cpuprofile.Start(filepath.Join(b.ProfileDir, "bench.pprof"))
		if err != nil {
			return err
		}
		defer stop()
	}
	if !onlyRegistry {
		if err := hubbench.Run(ctx, b, o, out, cmd.OutOrStdout()); err != nil || !withRegistry {
			return err
		}
		out = filepath.Join(out, "registry")
	}
	ro.Quick, ro.Progress = o.Quick, p
	return registrybench.Run(ctx, b, ro, out, cmd.OutOrStdout())
}

func benchDeviceCmd() *cobra.Command {
	var o devicebench.Options
	var out, link, schemes, protos, trace string
	c := &cobra.Command{
		Use:   "device",
		Short: "Device benchmark (paper 000 section VI): HTTP over plain, HTTPS, iotsafe and OpenSSH on an emulated 802.15.4 link",
		Long: `Reproduce paper 000's device benchmark: HTTP GETs of random text files (4 B to 262 KB)
from a device namespace to a gateway's server, over the lab's emulated link (default
IEEE 802.15.4 with 6LoWPAN, see 'iotsafe bench link'), by each scheme: plain HTTP, HTTPS
with TLS 1.2 (ECDHE-ECDSA-AES256-GCM-SHA384) and TLS 1.3, iotsafe's SSH forward, and
OpenSSH with and without compression (-C); each over HTTP/1.1 (a new connection per
request) and HTTP/2 (one connection per series; h2c through the forwards).

Results go to --out (default ./bench-results/device-TIMESTAMP/): device.csv,
environment.json, summary.json (schema: docs/bench.md), report.html with figs. 11-14.
Needs root (network namespaces, sshd). --quick checks the harness in a few minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			prof, err := linkemu.Lookup(link)
			if err != nil {
				return err
			}
			o.Link = prof
			if schemes != "" {
				for _, s := range strings.Split(schemes, ",") {
					if !slices.Contains(devicebench.Schemes, s) {
						return fmt.Errorf("--schemes: %q is not one of %s", s, strings.Join(devicebench.Schemes, ", "))
					}
					o.Schemes = append(o.Schemes, s)
				}
			}
			if protos != "" {
				for _, p := range strings.Split(protos, ",") {
					if p != "h1" && p != "h2" {
						return fmt.Errorf("--protos: %q is not h1 or h2", p)
					}
					o.Protos = append(o.Protos, p)
				}
			}
			if trace != "" {
				tf, err := os.Create(trace)
				if err != nil {
					return err
				}
				defer tf.Close()
				o.Trace = tf
			}
			return runLab(cmd, "device", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return devicebench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "three sizes, five requests each: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/device-TIMESTAMP)")
	fl.StringVar(&link, "link", "802154", "link profile: 802154, wifi, lte, ethernet")
	fl.StringVar(&schemes, "schemes", "", "comma-separated: "+strings.Join(devicebench.Schemes, ", ")+" (default all)")
	fl.StringVar(&protos, "protos", "", "h1, h2 (default both)")
	fl.IntSliceVar(&o.Sizes, "sizes", nil, "file sizes in bytes (default the paper's 4 B to 262144 B)")
	fl.IntVar(&o.Requests, "requests", 0, "sequential requests per size (default 100, as the paper; 5 with --quick)")
	fl.StringVar(&trace, "trace", "", "write a line per packet on the link to FILE (time, direction, bytes, frames, TCP flags, payload)")
	fl.IntVar(&o.MaxBytes, "max-bytes", 0, "cap on one series' bytes: fewer requests (at least 3) for big files (default 2 MiB)")
	return c
}

func benchServeFilesCmd() *cobra.Command {
	var listen, tlsListen, cert, key string
	c := &cobra.Command{
		Use: "serve-files", Hidden: true, Short: "lab helper: the gateway's file server of the device bench", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devicebench.ServeFiles(cmd.Context(), listen, tlsListen, cert, key, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&listen, "listen", "[::]:8080", "HTTP/1.1 and h2c address")
	c.Flags().StringVar(&tlsListen, "tls-listen", "[::]:8443", "HTTPS address")
	c.Flags().StringVar(&cert, "cert", "", "certificate PEM file")
	c.Flags().StringVar(&key, "key", "", "key PEM file")
	return c
}

func benchDeviceClientCmd() *cobra.Command {
	var ca string
	c := &cobra.Command{
		Use: "device-client", Hidden: true, Short: "lab helper: the device's HTTP client (commands on standard input)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devicebench.DeviceClient(cmd.Context(), ca, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&ca, "ca", "", "CA certificate PEM file for HTTPS")
	return c
}

func benchLinkCmd() *cobra.Command {
	var link string
	var n int
	var format string
	var asJSON bool
	c := &cobra.Command{
		Use:   "link",
		Short: "Validate an emulated link: bulk TCP goodput over it beside the model's ceiling",
		Long: `Joins two fresh network namespaces (device side, gateway side) by the lab's user-space
link emulator (TUN devices and a bridge that paces packets as the link model says: for
802.15.4, 6LoWPAN fragmentation into 127-byte frames, airtime at 250 kbit/s with the
PHY, MAC, ACK, interframe and CSMA/CA costs, one half-duplex medium), sends --bytes over
one TCP connection and prints the measured goodput beside the model's theoretical
maximum, with frames, link bytes and channel efficiency. Needs root; the namespaces are
removed afterwards. Constants and sources: docs/bench.md and internal/linkemu.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			prof, err := linkemu.Lookup(link)
			if err != nil {
				return err
			}
			if n <= 0 {
				n = 64 << 10
				if !prof.Is802154 {
					n = 64 << 20
				}
			}
			lab.SweepStale(cmd.ErrOrStderr())
			fmt.Fprintf(cmd.ErrOrStderr(), "sending %d bytes over the emulated %s link...\n", n, link)
			r, err := linkbench.Measure(cmd.Context(), prof, n)
			if err != nil {
				return err
			}
			if asJSON || format == "json" {
				return printJSON(cmd.OutOrStdout(), r)
			}
			linkbench.Print(cmd.OutOrStdout(), r)
			return nil
		},
	}
	c.Flags().StringVar(&link, "link", "802154", "link profile: 802154, wifi, lte, ethernet")
	c.Flags().IntVar(&n, "bytes", 0, "bytes to send (default 64 KiB on 802.15.4, 64 MiB otherwise)")
	c.Flags().StringVarP(&format, "output", "o", "table", "print as table or json")
	c.Flags().BoolVar(&asJSON, "json", false, "same as -o json")
	c.Flags().MarkHidden("json")
	c.PreRunE = func(*cobra.Command, []string) error {
		if format != "table" && format != "json" {
			return fmt.Errorf("-o %s: want table or json", format)
		}
		return nil
	}
	return c
}

func benchServeAppCmd() *cobra.Command {
	var listen string
	var size int
	c := &cobra.Command{
		Use: "serve-app", Hidden: true, Short: "lab helper: the device application (GET / answers --size bytes)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeApp(cmd.Context(), listen, size, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address")
	c.Flags().IntVar(&size, "size", 1024, "body bytes")
	return c
}

func benchServeHTTPSCmd() *cobra.Command {
	var listen, cert, key string
	var size int
	c := &cobra.Command{
		Use: "serve-https", Hidden: true, Short: "lab helper: the HTTPS baseline (HTTP/1.1 and HTTP/2)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeHTTPS(cmd.Context(), listen, size, cert, key, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address")
	c.Flags().IntVar(&size, "size", 1024, "body bytes")
	c.Flags().StringVar(&cert, "cert", "", "certificate PEM file")
	c.Flags().StringVar(&key, "key", "", "key PEM file")
	return c
}

// choices parses a comma-separated flag whose values must come from allowed; nil if
// the flag is empty (meaning all).
func choices(flag, list string, allowed []string) (map[string]bool, error) {
	var set map[string]bool
	for _, v := range strings.Split(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if !slices.Contains(allowed, v) {
			return nil, fmt.Errorf("%s: %q is not one of %s", flag, v, strings.Join(allowed, ", "))
		}
		if set == nil {
			set = map[string]bool{}
		}
		set[v] = true
	}
	return set, nil
}

func benchFleetCmd() *cobra.Command {
	var fc lab.FleetConfig
	var hostKey string
	c := &cobra.Command{
		Use: "fleet", Hidden: true, Short: "lab helper: the device side, S sessions x P reverse forwards", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := os.ReadFile(hostKey)
			if err != nil {
				return err
			}
			if fc.HostKey, _, _, _, err = ssh.ParseAuthorizedKey(b); err != nil {
				return fmt.Errorf("--host-key: %w", err)
			}
			return lab.RunFleet(cmd.Context(), fc, cmd.OutOrStdout())
		},
	}
	fl := c.Flags()
	fl.StringVar(&fc.Server, "server", "", "SSH server address")
	fl.StringVar(&hostKey, "host-key", "", "server's public host key file")
	fl.StringVar(&fc.Target, "target", "", "device application address")
	fl.IntVar(&fc.Sessions, "sessions", 1, "sessions")
	fl.IntVar(&fc.Forwards, "forwards", 1, "reverse forwards per session")
	fl.BoolVar(&fc.IoTsafe, "iotsafe", false, "log in as dev0..devN-1 and forward aliases f0..fP-1")
	fl.BoolVar(&fc.Multiplex, "multiplex", false, "with --iotsafe: carry the forwards in one multiplexed channel (as the agent does by default)")
	fl.StringVar(&fc.Prefix, "prefix", "dev", "with --iotsafe: device names are PREFIX0, PREFIX1, ...")
	fl.StringVar(&fc.User, "user", "root", "user for other servers")
	fl.StringVar(&fc.KeyDir, "key-dir", "", "folder of the keys")
	fl.IntVar(&fc.Parallel, "parallel", 32, "concurrent handshakes")
	return c
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
