package labcmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/wsbench"
)

func benchWebSocketCmd() *cobra.Command {
	var o wsbench.Options
	var out string
	c := &cobra.Command{
		Use:   "websocket",
		Short: "DeviceHive's WebSocket API beside REST: notifications/s over one socket, subscribers per GiB",
		Long: `One device stores --notifications notifications on the hub's plain listener three
ways in the same run: over REST on one keep-alive connection, over one WebSocket
sending each notification/insert once the last was answered, and over one WebSocket
with --window in flight; the hub's CPU per notification for each. Then --subscribers
devices each hold a socket with a command subscription, and then each a REST long poll
for its commands instead: the hub's memory (PSS) per client held, and how many a GiB
holds. Everything runs on loopback.

Results go to --out (default ./bench-results/websocket-TIMESTAMP/): paths.csv,
holdings.csv, environment.json, summary.json (schema: docs/bench.md) and report.html.
--quick (200 notifications, 20 subscribers) checks the harness; its figures are not
measurements.`,
		Example: `  iotsafe bench websocket --quick
  iotsafe bench websocket --notifications 20000 --subscribers 2000 --reps 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(cmd, "websocket", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return wsbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "200 notifications, 20 subscribers: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/websocket-TIMESTAMP)")
	fl.IntVar(&o.Notifications, "notifications", 0, "notifications per path (default 20000)")
	fl.IntVar(&o.Window, "window", 0, "requests in flight on the pipelined socket (default 32)")
	fl.IntVar(&o.Subscribers, "subscribers", 0, "devices each holding a subscription, then a long poll (default 2000; at most 9000)")
	fl.IntVar(&o.Reps, "reps", 0, "repetitions, a fresh hub each (default 3)")
	return c
}
