package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
)

func mqttCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "mqtt",
		Short: "The hub's MQTT broker and its bridge to a central broker",
	}
	var asJSON bool
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
			if asJSON {
				if err := printJSON(cmd.OutOrStdout(), map[string]any{"listeners": mqttListeners(h), "mqtt": h.MQTT}); err != nil {
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
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(status)
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
	row("queue", "%d messages (%s) waiting for the central broker", br.Queued, byteCount(br.QueuedBytes))
	row("", "%d sent, %d acknowledged, %d refused by the centre, %d dropped, %d came in, %d reconnections", br.Sent, br.Delivered, br.Refused, br.Dropped, br.Received, br.Reconnects)
	if m.NotBridged > 0 {
		row("", "%d messages not taken by the queue (full): not acknowledged to their devices, which send them again", m.NotBridged)
	}
}

// byteCount writes a size for people.
func byteCount(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
