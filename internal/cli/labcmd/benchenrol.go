package labcmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/enrolbench"
)

func benchEnrolCmd() *cobra.Command {
	var o enrolbench.Options
	var out string
	c := &cobra.Command{
		Use:   "enrol",
		Short: "Enrolling a fleet: devices joining with one token, or by a manufacturer's certificate, at once, beside the operator's bulk import",
		Long: `--devices devices (10,000), each with a key made on its side, enrol it with one join
token over SSH ('iotsafe agent join' does the same), --concurrency at once (200); on a
fresh hub that trusts a manufacturer's CA, the same number log in once each with a
certificate of that CA and are enrolled on that login (zero-touch); then, on a fresh
hub, the same number of keys are enrolled by one 'iotsafe device import' through the
running hub. For each: enrolments per second, the hub's CPU per enrolment,
and its memory (PSS) and registry size on disk per enrolled device. Everything runs on
loopback; the devices come from loopback addresses of their own, eight per address.

Results go to --out (default ./bench-results/enrol-TIMESTAMP/): ways.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (20
devices) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench enrol --quick
  iotsafe bench enrol --devices 10000 --concurrency 200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(cmd, "enrol", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return enrolbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "20 devices: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/enrol-TIMESTAMP)")
	fl.IntVar(&o.Devices, "devices", 0, "devices enrolled each way (default 10000)")
	fl.IntVar(&o.Concurrency, "concurrency", 0, "devices joining at once (default 200)")
	return c
}
