package cli

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/demo"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/logging"
)

// demoDomain is the demo front door's domain: *.localhost names resolve to loopback.
const demoDomain = "devices.localhost"

func demoCmd(g *globals) *cobra.Command {
	var devices int
	var duration time.Duration
	var quiet, soapOn bool
	var front, mqttTLS string
	c := &cobra.Command{
		Use:         "demo",
		Annotations: map[string]string{createsData: ""},
		Short:       "Run a hub with simulated devices on the local data folder",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := hub.LoadConfig(g.config, g.data)
			if err != nil {
				return err
			}
			if quiet {
				cfg.Log.Level = "warn"
			}
			if !cfg.Frontdoor.Enabled() && front != "" {
				cfg.Frontdoor.Listen, cfg.Frontdoor.Domain = front, demoDomain
				cfg.ApplyDefaults()
			}
			// The broker: a plain listener for devices over their SSH session, and TLS
			// with the front door's certificate.
			if !cfg.MQTT.Enabled() && mqttTLS != "" && cfg.Frontdoor.Enabled() {
				cfg.MQTT.Listen, cfg.MQTT.TLSListen = "127.0.0.1:0", mqttTLS
				cfg.ApplyDefaults()
			}
			// SOAP devices (paper 001) on the front door.
			if soapOn && cfg.Frontdoor.Enabled() {
				cfg.SOAP.Enabled = true
			}
			log, _ := logging.New(cfg.Log, cmd.ErrOrStderr())
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			defer announceHub(g.data, log)()
			bin := os.Args[0]
			return demo.Run(ctx, demo.Options{DataDir: g.data, Config: cfg, Devices: devices, Binary: bin, Version: Version, Out: cmd.OutOrStdout(), Logger: log})
		},
	}
	c.Flags().IntVar(&devices, "devices", 3, "number of simulated devices")
	c.Flags().DurationVar(&duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	c.Flags().BoolVar(&quiet, "quiet", true, "only warnings and errors in the log")
	c.Flags().StringVar(&front, "frontdoor", "127.0.0.1:8443", "HTTPS front door address for domain "+demoDomain+" unless the config sets one; \"\" for none")
	c.Flags().StringVar(&mqttTLS, "mqtt", "127.0.0.1:8883", "MQTT over TLS address (with the front door's certificate) unless the config sets a broker; \"\" for none")
	c.Flags().BoolVar(&soapOn, "soap", true, "the SOAP endpoint on the front door (paper 001), if the front door runs")
	return c
}
