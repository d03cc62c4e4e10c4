package labcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/relaybench"
)

func benchRelayCmd() *cobra.Command {
	var o relaybench.Options
	var out string
	c := &cobra.Command{
		Use:   "relay",
		Short: "Gateways relaying their devices' notifications into the centre's store: rate and centre CPU, beside direct REST",
		Long: `Enrol G gateway hubs at a central hub, store a backlog of N notifications in each
gateway's store (as if its devices had posted them while the centre was away), start
the gateways and measure how fast their backlogs drain into the centre's store over
their SSH sessions, the centre's and the gateways' CPU per notification, and whether
each arrived once. Then, in the same run, post as many notifications to the centre
directly over its REST API from C clients (devices of the centre, one keep-alive
connection each) for the peer figures. Every hub runs on loopback.

Results go to --out (default ./bench-results/relay-TIMESTAMP/): reps.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (one
gateway, 200 notifications) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench relay --quick
  iotsafe bench relay --gateways 4 --notifications 50000 --reps 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Gateways < 0 || o.Gateways > 100 {
				return fmt.Errorf("--gateways: %d is out of range 1..100", o.Gateways)
			}
			if o.Devices < 0 || o.Devices > 10000 {
				return fmt.Errorf("--devices: %d is out of range 1..10000", o.Devices)
			}
			if o.Notifications < 0 || o.Clients < 0 || o.Reps < 0 || o.Timeout < 0 {
				return fmt.Errorf("--notifications, --clients, --reps and --timeout must not be negative")
			}
			return runLab(cmd, "relay", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return relaybench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "one gateway, 200 notifications: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/relay-TIMESTAMP)")
	fl.IntVar(&o.Gateways, "gateways", 0, "gateway hubs (default 4)")
	fl.IntVar(&o.Devices, "devices", 0, "devices per gateway whose notifications make the backlog (default 100)")
	fl.IntVar(&o.Notifications, "notifications", 0, "backlog per gateway (default 50000)")
	fl.IntVar(&o.Clients, "clients", 0, "REST clients of the direct path (default 8)")
	fl.IntVar(&o.Reps, "reps", 0, "repetitions, fresh hubs each (default 3)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "the longest wait for either path (default 10m)")
	return c
}
