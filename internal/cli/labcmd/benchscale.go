package labcmd

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/scalebench"
)

func benchScaleCmd() *cobra.Command {
	var o scalebench.Options
	var out string
	c := &cobra.Command{
		Use:   "scale",
		Short: "The gateway tier: devices behind gateways at one central hub: memory, descriptors, req/s, restarts",
		Long: `Paper 000's three-level scheme at scale. G gateway hubs, each in its own network
namespace (root) joined to the centre's by a veth pair, each with M simulated devices,
relay them to one central hub over one SSH session each; D more devices connect to the
centre directly. The lab measures the centre's memory and descriptors per device, the
requests per second and the centre's CPU per request through gateways and directly, and
how long until every device answers again after a gateway restart and after a centre
restart, and whether any socket address moved.

Targets (issue 17): 100,000 devices at one centre (--gateways 100 --devices 1000), at
most 4 KiB of the centre's memory per device behind a gateway, every device back within
30 s of a centre restart on the same address, under 20,000 descriptors.

Results go to --out (default ./bench-results/scale-TIMESTAMP/): paths.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (2
gateways x 5 devices, 5 direct) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench scale --quick
  iotsafe bench scale --gateways 10 --devices 1000
  iotsafe bench scale                     # 100 x 1,000: the issue's target`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("bench scale puts each gateway in a network namespace of its own: run it as root")
			}
			for name, v := range map[string]int{"--gateways": o.Gateways, "--devices": o.Devices, "--direct": o.Direct, "--concurrency": o.Concurrency} {
				if v < 0 || v > 1_000_000 {
					return fmt.Errorf("%s: %d is out of range", name, v)
				}
			}
			if o.Gateways > 2000 {
				return fmt.Errorf("--gateways: %d: at most 2,000 (each is a hub process and a namespace)", o.Gateways)
			}
			if o.Window < 0 || o.Timeout < 0 {
				return errors.New("--window and --timeout must not be negative")
			}
			return runLab(cmd, "scale", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return scalebench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "2 gateways x 5 devices, 5 direct: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/scale-TIMESTAMP)")
	fl.IntVar(&o.Gateways, "gateways", 0, "gateway hubs (default 100)")
	fl.IntVar(&o.Devices, "devices", 0, "simulated devices per gateway (default 1000)")
	fl.IntVar(&o.Direct, "direct", 0, "devices connected to the centre directly, for comparison (default 1000)")
	fl.DurationVar(&o.Window, "window", 0, "load per path (default 10s)")
	fl.IntVar(&o.Concurrency, "concurrency", 0, "requests in flight (default 32)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "the longest wait for any phase (default 10m)")
	return c
}
