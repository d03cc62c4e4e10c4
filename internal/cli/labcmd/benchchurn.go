package labcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/churnbench"
)

func benchChurnCmd() *cobra.Command {
	var o churnbench.Options
	var out string
	c := &cobra.Command{
		Use:   "churn",
		Short: "A hub under a churning fleet: agents SIGKILLed and restarted while requests go through; reconnection p50/p99, hub memory and descriptors before and after",
		Long: `Start N real agent processes on one hub, then every interval SIGKILL a share of them
(often while the hub opens one of their connections) and start them again at once, while
requests go through every device's protected socket. Measures each restarted agent's
time to a ready session (p50/p99), the requests answered, and the hub's PSS, RSS and open
descriptors with the whole fleet connected before and after the churn (a leak shows as
growth). A hub that dies fails the run with the end of its log (issue 56: a device
refusing a connection used to crash it).

Results go to --out (default ./bench-results/churn-TIMESTAMP/): kills.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (5
agents, 5 s) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench churn --quick
  iotsafe bench churn --devices 150 --kill-share 0.1 --every 3s --duration 2m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Devices < 0 || o.Devices > 5000 {
				return fmt.Errorf("--devices: %d is out of range 1..5000 (each is a process)", o.Devices)
			}
			if o.KillShare < 0 || o.KillShare > 1 {
				return fmt.Errorf("--kill-share: %g is not a share between 0 and 1", o.KillShare)
			}
			if o.Every < 0 || o.Duration < 0 || o.Timeout < 0 || o.Requesters < 0 {
				return fmt.Errorf("--every, --duration, --timeout and --requesters must not be negative")
			}
			if o.Every > 0 && o.Duration > 0 && o.Duration < o.Every {
				return fmt.Errorf("--duration %s is shorter than one round (--every %s)", o.Duration, o.Every)
			}
			return runLab(cmd, "churn", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return churnbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "5 agents for 5 s: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/churn-TIMESTAMP)")
	fl.IntVar(&o.Devices, "devices", 0, "agent processes (default 150)")
	fl.Float64Var(&o.KillShare, "kill-share", 0, "share of the fleet killed and restarted each round (default 0.1)")
	fl.DurationVar(&o.Every, "every", 0, "time between rounds (default 3s)")
	fl.DurationVar(&o.Duration, "duration", 0, "how long the churn lasts (default 2m)")
	fl.IntVar(&o.Requesters, "requesters", 0, "concurrent requests through the devices (default 8)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "wait at most this long for an agent's session (default 2m)")
	return c
}
