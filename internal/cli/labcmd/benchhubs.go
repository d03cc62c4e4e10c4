package labcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/hubsbench"
)

func benchHubsCmd() *cobra.Command {
	var o hubsbench.Options
	var out string
	c := &cobra.Command{
		Use:   "hubs",
		Short: "Several hubs on one PostgreSQL registry: revocation across hubs, a killed hub's devices back through the others",
		Long: `Start a scratch PostgreSQL server and N hubs sharing it as their registry, each in a
network namespace of its own on one Ethernet segment with its peer link, and a fleet of
real agents in another namespace listing every hub. Measure: every device reached
through the last hub; revocations written at the last hub until the session is gone at
the hub holding it (target: under 1 s); the first hub killed with SIGKILL until every
remaining device answers again through the others (target: within 30 s).

Results go to --out (default ./bench-results/hubs-TIMESTAMP/): revokes.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. Needs root
(network namespaces). --quick (5 devices) checks the harness; its figures are not
measurements.`,
		Example: `  sudo iotsafe bench hubs --quick
  sudo iotsafe bench hubs --hubs 3 --devices 300`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Hubs < 0 || o.Hubs == 1 || o.Hubs > 10 {
				return fmt.Errorf("--hubs: %d is out of range 2..10", o.Hubs)
			}
			if o.Devices < 0 || o.Devices > 2000 || o.Revokes < 0 {
				return fmt.Errorf("--devices must be 1..2000 (each is an agent process) and --revokes not negative")
			}
			return runLab(cmd, "hubs", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return hubsbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "5 devices, 2 revocations: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/hubs-TIMESTAMP)")
	fl.IntVar(&o.Hubs, "hubs", 0, "hubs sharing the registry (default 3)")
	fl.IntVar(&o.Devices, "devices", 0, "agents, each a process (default 100)")
	fl.IntVar(&o.Revokes, "revokes", 0, "revocations timed (default 10)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "longest wait for the fleet, a revocation or the recovery (default 2m)")
	return c
}
