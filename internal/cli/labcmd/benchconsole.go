package labcmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/consolebench"
)

func benchConsoleCmd() *cobra.Command {
	var o consolebench.Options
	var out string
	c := &cobra.Command{
		Use:   "console",
		Short: "The operator console's pages with a registry of 100,000 devices: time per page against 200 ms",
		Long: `A hub whose registry holds --devices devices (100,000), enrolled by one import, serves
its console on the front door; a client logs in as a browser does and fetches each page
--requests times (30): the fleet, the device list's first and last page, a name search,
a filter with a sort, a device's page, the audit log and the crypto posture. For each:
the time to the last byte, median, 95th percentile and worst, and whether the 95th
percentile is within 200 ms.

Results go to --out (default ./bench-results/console-TIMESTAMP/): pages.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (200
devices, 3 requests) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench console --quick
  iotsafe bench console --devices 100000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(cmd, "console", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return consolebench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "200 devices, 3 requests a page: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/console-TIMESTAMP)")
	fl.IntVar(&o.Devices, "devices", 0, "devices in the registry (default 100000)")
	fl.IntVar(&o.Requests, "requests", 0, "requests per page (default 30)")
	return c
}
