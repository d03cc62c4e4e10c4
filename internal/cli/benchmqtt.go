package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/mqttbench"
)

func benchMQTTCmd() *cobra.Command {
	var o mqttbench.Options
	var out string
	c := &cobra.Command{
		Use:   "mqtt",
		Short: "MQTT (paper 002): the bridge's store and forward while the central broker goes down",
		Long: `Start a central Mosquitto (TLS, passwords) and a site hub whose bridge carries its
devices' readings there; devices (mosquitto_pub, one TLS connection each) publish QoS 1
readings to the hub while the central broker is stopped and restarted; a reader at the
centre (mosquitto_sub, persistent session) checks that every reading the hub
acknowledged arrives, in order per device, and counts duplicates. The target: 100,000
readings, the centre stopped twice, 0 lost.

Results go to --out (default ./bench-results/mqtt-TIMESTAMP/): outages.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (300
readings, one outage) checks the harness; its figures are not measurements.`,
		Example: `  iotsafe bench mqtt --quick
  iotsafe bench mqtt --messages 100000 --outages 2
  iotsafe bench mqtt --kill     # a crash of the centre (SIGKILL) instead of a stop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := &o.Bridge
			if b.Messages < 0 || b.Publishers < 0 || b.Outages < 0 || b.Down < 0 || b.Timeout < 0 {
				return fmt.Errorf("--messages, --publishers, --outages, --down and --timeout must not be negative")
			}
			if b.Publishers > 1000 {
				return fmt.Errorf("--publishers: %d is more than 1000 (one process each)", b.Publishers)
			}
			if out == "" {
				out = filepath.Join("bench-results", "mqtt-"+time.Now().Format("20060102-150405"))
			}
			bin, scratch, progress, err := lab.Setup(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer os.RemoveAll(scratch)
			b.Progress = progress
			return mqttbench.Run(cmd.Context(), &lab.Bench{Bin: bin, Dir: scratch}, o, out, cmd.OutOrStdout())
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "300 readings, one outage: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/mqtt-TIMESTAMP)")
	fl.IntVar(&o.Bridge.Messages, "messages", 0, "QoS 1 readings in all (default 100000)")
	fl.IntVar(&o.Bridge.Publishers, "publishers", 0, "devices publishing them (default 10)")
	fl.IntVar(&o.Bridge.Outages, "outages", 0, "times the central broker stops (default 2)")
	fl.DurationVar(&o.Bridge.Down, "down", 0, "how long it stays down each time (default 3s)")
	fl.BoolVar(&o.Bridge.Kill, "kill", false, "SIGKILL the central broker (a crash) instead of SIGTERM")
	fl.DurationVar(&o.Bridge.Timeout, "timeout", 0, "wait at most this long for the last readings (default 5m)")
	return c
}
