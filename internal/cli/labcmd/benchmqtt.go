package labcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/mqttbench"
	"github.com/iotsafe/iotsafe/internal/lab/mqttconns"
	"github.com/iotsafe/iotsafe/internal/lab/mqttmatrix"
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
			return runLab(cmd, "mqtt", out, "", func(ctx context.Context, lb *lab.Bench, out string, p *lab.Progress) error {
				b.Progress = p
				return mqttbench.Run(ctx, lb, o, out, cmd.OutOrStdout())
			})
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
	c.AddCommand(benchMQTTMatrixCmd(), benchMQTTConnectionsCmd())
	return c
}

func benchMQTTConnectionsCmd() *cobra.Command {
	var o mqttconns.Options
	var out string
	c := &cobra.Command{
		Use:   "connections",
		Short: "MQTT: 10,000 device connections over TLS on one broker, the hub's and Mosquitto's",
		Long: `A fleet on one broker: --clients devices (10,000) connect over TLS with their own names
and secrets, at most --connect-concurrency handshakes at once; once every one is
connected, each publishes a QoS 1 reading every --interval (1s) for --duration (60s).
Every reading must be acknowledged. The broker's memory (PSS) is read started, with
every device connected and idle, and while publishing: per connection, for the hub's
broker and for Mosquitto (Debian's) in the same run. The target (issue 14): 10,000
devices on the hub, no reading lost.

One descriptor per connection on each side: the bench raises its open-file limit as far
as it may (root: to the kernel's), and refuses more clients than it can hold.

Results go to --out (default ./bench-results/mqtt-connections-TIMESTAMP/): fleets.csv,
environment.json, summary.json (schema: docs/bench.md) and report.html. --quick (50
devices, 2 s) checks the harness.`,
		Example: `  iotsafe bench mqtt connections --quick
  iotsafe bench mqtt connections                      # 10,000 devices, 60 s, hub and Mosquitto
  iotsafe bench mqtt connections --brokers hub --clients 5000 --duration 5m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLab(cmd, "mqtt-connections", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return mqttconns.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "50 devices for 2 s: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/mqtt-connections-TIMESTAMP)")
	fl.IntVar(&o.Clients, "clients", 0, "devices connected at once (default 10000)")
	fl.DurationVar(&o.Duration, "duration", 0, "publishing, once every device is connected (default 60s)")
	fl.DurationVar(&o.Interval, "interval", 0, "between one device's readings (default 1s)")
	fl.IntVar(&o.ConnectConcurrency, "connect-concurrency", 0, "TLS handshakes at once while connecting (default 200)")
	fl.StringSliceVar(&o.Brokers, "brokers", nil, "hub, mosquitto (default both)")
	return c
}

func benchMQTTMatrixCmd() *cobra.Command {
	var o mqttmatrix.Options
	var out string
	var qos []int
	var profile string
	c := &cobra.Command{
		Use:   "matrix",
		Short: "MQTT (paper 002): Mosquitto and the hub's broker over every TLS suite x QoS x MQTT version x link",
		Long: `The benchmark of paper 002: the same load (10 clients x 100 messages, each message sent
once the last was acknowledged, mqtt-benchmark's metrics) against Debian's Mosquitto
(OpenSSL) and the hub's broker (Go), over each TLS version and cipher suite, QoS 0/1/2,
MQTT 3.1.1 and 5, and each link: loopback, or the lab's emulated ethernet, wifi, lte or
802154 with client and broker in namespaces of their own (needs root). Plain MQTT
(Mosquitto without TLS) is the ceiling; "ssh" is a device's MQTT through its agent to
the hub's plain listener. A cell a peer cannot run (DHE: Go has none; a TLS 1.3 suite
Go will not be told to use) is listed with the reason.

The target (issue 14): the hub's broker at or above Mosquitto in msg/s at every cell
both run. The full matrix on one link is about 230 runs per repetition; narrow it with
the flags.

Results go to --out (default ./bench-results/mqtt-matrix-TIMESTAMP/): runs.csv,
cells.csv, environment.json, summary.json (schema: docs/bench.md) and report.html
(table 2, bandwidth tables, delay boxplots). --quick checks the harness on loopback and
emulated Ethernet; its figures are not measurements.`,
		Example: `  iotsafe bench mqtt matrix --quick
  iotsafe bench mqtt matrix                                  # loopback, every suite, 3 repetitions
  iotsafe bench mqtt matrix --links wifi,lte --tls 1.2 --qos 0
  iotsafe bench mqtt matrix --brokers hub,mosquitto --suites ECDHE-ECDSA-AES128-GCM-SHA256,TLS_AES_128_GCM_SHA256`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.QoS = qos
			return runLab(cmd, "mqtt-matrix", out, profile, func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return mqttmatrix.RunAndReport(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "a few cells, 2 clients x 5 messages, loopback and ethernet: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/mqtt-matrix-TIMESTAMP)")
	fl.StringSliceVar(&o.Links, "links", nil, "loopback, ethernet, wifi, lte, 802154 (default loopback)")
	fl.StringSliceVar(&o.Brokers, "brokers", nil, "mosquitto, hub, plain, ssh (default all)")
	fl.StringSliceVar(&o.TLS, "tls", nil, "TLS versions: 1.2, 1.3 (default both)")
	fl.StringSliceVar(&o.Suites, "suites", nil, "cipher suites, OpenSSL names for TLS 1.2, TLS_* for 1.3 (default the paper's 16 + 3)")
	fl.IntSliceVar(&qos, "qos", nil, "QoS levels (default 0,1,2)")
	fl.StringSliceVar(&o.MQTT, "mqtt", nil, "MQTT versions: 3.1.1, 5 (default both)")
	fl.IntVar(&o.Clients, "clients", 0, "clients per run (default 10)")
	fl.IntVar(&o.Messages, "messages", 0, "messages per client (default 100)")
	fl.IntVar(&o.Payload, "payload", 0, "bytes per message (default 100)")
	fl.IntVar(&o.Reps, "reps", 0, "runs per cell; the median is reported (default 3)")
	fl.BoolVar(&o.MosquittoNoDelay, "mosquitto-nodelay", false, "run Mosquitto with Nagle's algorithm off (set_tcp_nodelay true), as the hub runs; its default leaves it on, which costs its TLS 1.3 connections 40-50 ms")
	fl.StringVar(&profile, "profile", "", "write a CPU profile of every hub started into this folder")
	return c
}
