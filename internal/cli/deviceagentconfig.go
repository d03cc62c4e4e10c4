package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	yaml "go.yaml.in/yaml/v3"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/cli/agentcmd"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

func deviceAgentConfigCmd(g *globals) *cobra.Command {
	var hubAddr, keyPath string
	var expose, forward []string
	c := &cobra.Command{
		Use:   "agent-config NAME --hub HOST:PORT",
		Short: "Print a device's agent.yaml: the hub's host keys pinned, forwards checked against its profile",
		Long: `Print the agent.yaml a device's agent reads (iotsafe-agent --agent-config FILE): the hub's
address as devices reach it, the device's name and key path, the fingerprints of the hub's
host keys (the signing ones and, during a host key rotation, the next one, so the device
goes on trusting the hub after the promotion), and the forwards given with --expose and
--forward, each checked against the aliases of the device's profile. The profile's other
aliases are listed as comments. The key itself is not printed: copy the file 'iotsafe
device add --keygen' wrote to the device, at --key-path.

The keys pinned are this hub's (its data folder's). With several hubs sharing a registry
(--hub a:2222,b:2222), add the other hubs' fingerprints to hub_key, comma-separated
('iotsafe hostkey list' on each). A device behind a gateway connects to the gateway: make
its agent.yaml there.`,
		Example: `  iotsafe device agent-config dev42 --hub hub.example.com:2222 --expose http=127.0.0.1:80 \
      --forward 127.0.0.1:1883=broker > agent.yaml
  scp agent.yaml root@dev42:/etc/iotsafe/agent.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if hubAddr == "" {
				return errors.New("--hub HOST:PORT is required: the hub's address as the device reaches it (its DNS name and SSH port)")
			}
			for _, a := range strings.Split(hubAddr, ",") {
				if _, _, err := net.SplitHostPort(a); err != nil {
					return fmt.Errorf("--hub %s: want HOST:PORT (several: comma-separated): %v", a, err)
				}
			}
			if keyPath == "" {
				keyPath = "/etc/iotsafe/" + args[0]
			}
			keys, err := pinnedHostKeys(g.data)
			if err != nil {
				return err
			}
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				d, err := reg.Device(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				switch {
				case d.Revoked():
					return fmt.Errorf("device %s is revoked: its key is refused (remove it and enroll it again)", d.Name)
				case d.Via != "":
					return fmt.Errorf("device %s connects to its gateway %s: make its agent.yaml on that gateway", d.Name, d.Via)
				}
				p, err := reg.Profile(cmd.Context(), d.Profile)
				if err != nil {
					return err
				}
				text, err := agentConfigText(agentConfigOf{device: d.Name, profile: p, hub: hubAddr, key: keyPath, hubKeys: keys,
					expose: expose, forward: forward, made: time.Now()})
				if err != nil {
					return err
				}
				// What is printed must be what the agent takes.
				if err := agentcmd.CheckFile([]byte(text)); err != nil {
					return fmt.Errorf("the agent.yaml made for %s would be refused by the agent: %w", d.Name, err)
				}
				_, err = io.WriteString(cmd.OutOrStdout(), text)
				return err
			})
		},
	}
	fl := c.Flags()
	fl.StringVar(&hubAddr, "hub", "", "the hub's address HOST:PORT as the device reaches it; several, comma-separated, for hubs sharing a registry (pin the others' keys too)")
	fl.StringVar(&keyPath, "key-path", "", "where the device's private key is on the device (default /etc/iotsafe/NAME)")
	fl.StringArrayVar(&expose, "expose", nil, "a device service to expose: ALIAS=HOST:PORT on the device, ALIAS a reverse alias of its profile (repeatable)")
	fl.StringArrayVar(&forward, "forward", nil, "a hub service to reach: HOST:PORT=ALIAS, ALIAS a direct alias of its profile (repeatable)")
	return c
}

// pinnedHostKeys are the fingerprints a device should pin: the hub's signing keys and
// the next keys of a rotation in progress (not the retired ones).
func pinnedHostKeys(data string) ([]string, error) {
	entries, err := hostkey.List(data)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.State == "signing" || e.State == "next" {
			out = append(out, e.Fingerprint)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no host keys in %s: the hub creates them at its first start (is --data the hub's data folder?)", data)
	}
	return out, nil
}

type agentConfigOf struct {
	device          string
	profile         *profile.Profile
	hub, key        string
	hubKeys         []string
	expose, forward []string
	made            time.Time
}

// agentConfigText writes c as an agent.yaml with comments, after checking each forward
// against the profile's aliases.
func agentConfigText(c agentConfigOf) (string, error) {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# agent.yaml of %s (profile %s), made by 'iotsafe device agent-config' on %s.\n", c.device, c.profile.Name, c.made.Format("2006-01-02"))
	w("# On the device: iotsafe-agent --agent-config /etc/iotsafe/agent.yaml (docs/operations.md)\n")
	w("hub: %s\n", scalar(c.hub))
	w("device: %s\n", scalar(c.device))
	w("key: %s   # the private key 'iotsafe device add' wrote, mode 0600\n", scalar(c.key))
	w("# The hub's host keys: the signing ones, and the next one of a rotation in progress.\n")
	w("hub_key: %s\n", scalar(strings.Join(c.hubKeys, ",")))

	var exposed, forwarded []string
	for _, s := range c.expose {
		e, err := agent.ParseExpose(s)
		if err != nil {
			return "", err
		}
		if _, ok := c.profile.Reverse[e.Alias]; !ok {
			return "", fmt.Errorf("--expose %s: profile %s has no reverse alias %s (%s)", s, c.profile.Name, e.Alias, aliasList(slices.Collect(maps.Keys(c.profile.Reverse))))
		}
		exposed = append(exposed, e.Alias)
	}
	for _, s := range c.forward {
		f, err := agent.ParseForward(s)
		if err != nil {
			return "", err
		}
		if _, ok := c.profile.Direct[f.Alias]; !ok {
			return "", fmt.Errorf("--forward %s: profile %s has no direct alias %s (%s)", s, c.profile.Name, f.Alias, aliasList(slices.Collect(maps.Keys(c.profile.Direct))))
		}
		forwarded = append(forwarded, f.Alias)
	}
	// The profile's other aliases as comments, to uncomment with the service's port.
	list := func(key string, given, aliases, used []string, hint string) {
		slices.Sort(aliases)
		var rest []string
		for _, a := range aliases {
			if !slices.Contains(used, a) {
				rest = append(rest, fmt.Sprintf(hint, a))
			}
		}
		switch {
		case len(given) > 0:
			w("%s:\n", key)
		case len(rest) > 0:
			w("# %s:   (its profile allows these; uncomment with the port on the device)\n", key)
		}
		for _, s := range given {
			w("  - %s\n", scalar(s))
		}
		for _, s := range rest {
			w("#  - %s\n", s)
		}
	}
	list("expose", c.expose, slices.Collect(maps.Keys(c.profile.Reverse)), exposed, "%s=127.0.0.1:PORT")
	list("forward", c.forward, slices.Collect(maps.Keys(c.profile.Direct)), forwarded, "127.0.0.1:PORT=%s")
	return b.String(), nil
}

// aliasList names the aliases a profile has, for an error.
func aliasList(aliases []string) string {
	if len(aliases) == 0 {
		return "it has none"
	}
	slices.Sort(aliases)
	return "it has " + strings.Join(aliases, ", ")
}

// scalar is s as a YAML scalar, quoted where YAML needs it.
func scalar(s string) string {
	b, _ := yaml.Marshal(s)
	return strings.TrimSuffix(string(b), "\n")
}
