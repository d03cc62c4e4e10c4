package labcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/outagebench"
)

func benchOutageCmd() *cobra.Command {
	var o outagebench.Options
	var out string
	c := &cobra.Command{
		Use:   "outage",
		Short: "How fast a fleet is back after its hub was down: per-device times, retry herd, hub CPU",
		Long: `Start N agents (real agents, in this process, each with its own key and session) on
one hub, kill the hub with SIGKILL, keep it down, restart it on the same data folder and
address, and measure per device the time from the hub listening again to the device's
session being ready, every reconnect attempt (is there a thundering herd?) and the hub's
CPU for the reconnections. The target: every device back within 10 s of the hub.

Results go to --out (default ./bench-results/outage-TIMESTAMP/): back.csv, attempts.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (5
devices, 1 s down) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench outage --quick
  iotsafe bench outage --devices 300 --down 30s --reps 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Devices < 0 || o.Devices > 20000 {
				return fmt.Errorf("--devices: %d is out of range 1..20000", o.Devices)
			}
			if o.Down < 0 || o.Reps < 0 || o.Timeout < 0 || o.RecentMax < 0 {
				return fmt.Errorf("--down, --reps, --timeout and --recent-max must not be negative")
			}
			return runLab(cmd, "outage", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return outagebench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "5 devices, 1 s down: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/outage-TIMESTAMP)")
	fl.IntVar(&o.Devices, "devices", 0, "agents (default 300, the soak run's fleet)")
	fl.DurationVar(&o.Down, "down", 0, "how long the hub stays down (default 30s)")
	fl.IntVar(&o.Reps, "reps", 0, "outages in a row, same fleet (default 1)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "wait at most this long for the whole fleet (default 3m)")
	fl.DurationVar(&o.RecentMax, "recent-max", 0, "the agents' retry interval after a lost session (default the agent's, 5s)")
	return c
}
