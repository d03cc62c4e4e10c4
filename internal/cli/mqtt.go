package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
)

func mqttCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "mqtt",
		Short: "The hub's MQTT broker and its bridge to a central broker",
	}
	var outFmt *output
	status := &cobra.Command{
		Use:   "status",
		Short: "Listeners, clients, messages and the bridge's state and queue",
		Long: `Status asks the hub running on the data folder for its broker's state. It exits 0 when
the broker runs (and its bridge, if any, is connected), and 1 when no hub runs, the broker
is off, or the bridge is not connected: a monitoring check can run it as is. While the
bridge is down, outgoing messages wait in its queue (shown here).`,
		Example: `  iotsafe mqtt status
  iotsafe mqtt status --json | jq .mqtt.bridge.queued`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpStatus})
			if err != nil {
				return fmt.Errorf("the hub is not running (no answer on its admin socket in %s): %w", g.data, err)
			}
			h := rep.Hub
			if h == nil || h.MQTT == nil {
				return errors.New("the hub's MQTT broker is off: set mqtt.listen or mqtt.tls_listen in hub.yaml (docs/mqtt.md)")
			}
			if outFmt.structured() {
				if err := outFmt.print(cmd.OutOrStdout(), map[string]any{"listeners": mqttListeners(h), "mqtt": h.MQTT}); err != nil {
					return err
				}
			} else {
				printMQTTStatus(cmd.OutOrStdout(), h)
			}
			if br := h.MQTT.Bridge; br != nil && br.State != mqttbridge.StateConnected {
				return fmt.Errorf("the bridge to %s is %s", br.Address, br.State)
			}
			return nil
		},
	}
	outFmt = addOutput(status)
	c.AddCommand(status, mqttClientsCmd(g))
	return c
}

func mqttClientsCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "clients [DEVICE]",
		Short: "The clients connected to the hub's broker, by device",
		Long: `Clients lists the connections of the hub's broker, oldest first: the client identifier,
the device it is (or the platform app's front-door account), the listener (plain: over
the device's SSH session; tls), where it connects from, its MQTT version, the TLS
version and suite (and whether it logged in with a client certificate), how long it has
been connected, whether its session outlives the connection, and its subscriptions and
QoS 1/2 messages in flight. With DEVICE, only that device's clients.`,
		Example: `  iotsafe mqtt clients
  iotsafe mqtt clients dev42
  iotsafe mqtt clients --json | jq '.[] | select(.listener == "tls") | .device'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := admin.Request{Op: admin.OpMQTTClients}
			if len(args) == 1 {
				req.Device = args[0]
			}
			rep, err := admin.Call(g.adminSocket(), req)
			switch {
			case errors.Is(err, admin.ErrHubNotRunning):
				return fmt.Errorf("the hub is not running (no answer on its admin socket in %s): %w", g.data, err)
			case err != nil && rep.Error != "":
				return errors.New(rep.Error) // the hub's own words (the broker is off)
			case err != nil:
				return err
			}
			if outFmt.structured() {
				if rep.MQTTClients == nil {
					rep.MQTTClients = []admin.MQTTClient{}
				}
				return outFmt.print(cmd.OutOrStdout(), rep.MQTTClients)
			}
			if len(rep.MQTTClients) == 0 {
				if req.Device != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "no client of %s is connected\n", req.Device)
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), "no client is connected")
				}
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLIENT ID\tDEVICE\tLISTENER\tFROM\tMQTT\tTLS\tFOR\tSESSION\tSUBSCRIPTIONS\tIN FLIGHT")
			for _, c := range rep.MQTTClients {
				who := c.Device
				if c.Account != "" {
					who = "app " + c.Account
				}
				session := "clean"
				if c.Persistent {
					session = "persistent"
				}
				tlsInfo := c.TLS
				if tlsInfo == "" {
					tlsInfo = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", c.ClientID, who, c.Listener, c.Remote, c.MQTT, tlsInfo,
					time.Since(c.Since).Round(time.Second), session, c.Subscriptions, c.Inflight)
			}
			return tw.Flush()
		},
	}
	outFmt = addOutput(c)
	return c
}

func mqttListeners(h *admin.HubInfo) map[string]string {
	out := map[string]string{}
	for _, role := range []string{"mqtt", "mqtt_tls"} {
		if a, ok := h.Listeners[role]; ok {
			out[role] = a
		}
	}
	return out
}

func printMQTTStatus(w io.Writer, h *admin.HubInfo) {
	row := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-10s %s\n", name, fmt.Sprintf(format, args...))
	}
	m := h.MQTT
	ls := mqttListeners(h)
	if a, ok := ls["mqtt"]; ok {
		row("plain", "%s (devices over their SSH session)", a)
	}
	if a, ok := ls["mqtt_tls"]; ok {
		row("tls", "%s", a)
	}
	row("clients", "%d connected, %d persistent sessions away, %d subscriptions", m.Clients, m.SessionsAway, m.Subscriptions)
	row("messages", "%d received, %d sent, %d stored as notifications, %d retained, %d in flight", m.Received, m.Sent, m.Stored, m.Retained, m.Inflight)
	row("refused", "%d logins, %d topics (violations)", m.AuthRefused, m.TopicRefused)
	br := m.Bridge
	if br == nil {
		row("bridge", "none")
		return
	}
	state := br.State
	if br.State == mqttbridge.StateConnected && !br.Subscribed {
		state += " (subscribing)"
	}
	row("bridge", "to %s as %s: %s for %s", br.Address, br.ClientID, state, time.Since(br.Since).Round(time.Second))
	if br.LastError != "" {
		row("", "last error: %s", br.LastError)
	}
	row("queue", "%d messages (%s) waiting for the central broker", br.Queued, bytesize.Format(br.QueuedBytes))
	row("", "%d sent, %d acknowledged, %d refused by the centre, %d dropped, %d came in, %d reconnections", br.Sent, br.Delivered, br.Refused, br.Dropped, br.Received, br.Reconnects)
	if m.NotBridged > 0 {
		row("", "%d messages not taken by the queue (full): not acknowledged to their devices, which send them again", m.NotBridged)
	}
}
