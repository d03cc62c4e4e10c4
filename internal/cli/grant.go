package cli

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
)

type principalFlags struct{ user, group, account string }

func (p *principalFlags) add(c *cobra.Command, verb string) {
	c.Flags().StringVar(&p.user, "user", "", "local user NAME (or uid) to "+verb)
	c.Flags().StringVar(&p.group, "group", "", "local group NAME (or gid) to "+verb)
	c.Flags().StringVar(&p.account, "account", "", "front-door account NAME to "+verb+" (people over HTTPS)")
}

// grant builds a grant from flags and DEVICE|@GROUP ALIAS|'*', resolving user and group
// names to ids now (the kernel reports ids, and a renamed user must not inherit a
// permission); an account's id is resolved by the change path.
func (p *principalFlags) grant(args []string) (registry.Grant, error) {
	g := registry.Grant{Target: args[0], Alias: args[1]}
	given := 0
	for _, f := range []string{p.user, p.group, p.account} {
		if f != "" {
			given++
		}
	}
	switch {
	case given != 1:
		return g, errors.New("give exactly one of --user NAME, --group NAME or --account NAME")
	case p.account != "":
		g.Kind, g.Name = registry.PrincipalAccount, p.account
	case p.user != "":
		g.Kind, g.Name = registry.PrincipalUser, p.user
		u, err := user.Lookup(p.user)
		if err != nil {
			u, err = user.LookupId(p.user)
		}
		if err != nil {
			n, perr := strconv.ParseUint(p.user, 10, 32)
			if perr != nil {
				return g, fmt.Errorf("no local user %q", p.user)
			}
			g.XID = uint32(n)
			return g, nil
		}
		n, _ := strconv.ParseUint(u.Uid, 10, 32)
		g.XID, g.Name = uint32(n), u.Username
	default:
		g.Kind, g.Name = registry.PrincipalGroup, p.group
		gr, err := user.LookupGroup(p.group)
		if err != nil {
			gr, err = user.LookupGroupId(p.group)
		}
		if err != nil {
			n, perr := strconv.ParseUint(p.group, 10, 32)
			if perr != nil {
				return g, fmt.Errorf("no local group %q", p.group)
			}
			g.XID = uint32(n)
			return g, nil
		}
		n, _ := strconv.ParseUint(gr.Gid, 10, 32)
		g.XID, g.Name = uint32(n), gr.Name
	}
	return g, nil
}

func grantCmd(g *globals) *cobra.Command {
	var allowUnknown bool
	c := grantChangeCmd(g, "permit", &cobra.Command{
		Use:   "grant (--user NAME | --group NAME | --account NAME) (DEVICE | @DEVICEGROUP | @all) (ALIAS | '*' | +telemetry | +command | +manage | +view | +operate | +admin)",
		Short: "Let a local user or group, or a front-door account, reach a device service",
		Long: `Let a local user or group, or a front-door account, reach a device service.

'*' is every service of the device. Rights exist for front-door accounts (platform
apps, people in the operator console) besides services, and '*' includes none of them:
  +telemetry  read the device's notifications and the commands it was sent (REST
              /api/rest: list, poll, stream; MQTT subscriptions)
  +command    send the device commands and read their answers (REST), publish to its
              MQTT topics
  +manage     +telemetry and +command, and issue tokens for the device, change its
              data, remove it; on a name not enrolled (@all, or --allow-unknown),
              register it over the REST API (PUT /api/rest/device/NAME)
The operator console's roles (https://DOMAIN/console/, docs/console.md):
  +view       see the device in the console (state, sessions, crypto, grants, audit,
              notifications); includes +telemetry
  +operate    +view and +command: revoke, reinstate, send commands
  +admin      +operate and +manage: remove, rotate its secret; on @all also the
              console's accounts and policy pages

@all is every device, those enrolled later too.`,
		Example: `  iotsafe grant --user platform dev42 http       # strict: one service of one device
  iotsafe grant --group operators @sensors '*'    # wide: every service of a device group
  iotsafe grant --account alice dev42 http        # a person, over HTTPS through the front door
  iotsafe grant --account dashboard @sensors +telemetry   # a platform app reads their data
  iotsafe grant --account control @valves +command        # a platform app commands them
  iotsafe grant --user platform dev99 http --allow-unknown   # before dev99 is enrolled
  iotsafe grant --account provisioner @all +manage   # registers and manages the whole fleet over REST
  iotsafe grant --account oncall @network:plant-a +operate   # the console: revoke and reinstate plant A's devices`,
	}, "granted", func(gr registry.Grant) control.Change { return control.AddGrant{Grant: gr, AllowUnknown: allowUnknown} })
	c.Long += `

The device must be enrolled and have the service (a group must have a member), so a
typo is refused rather than kept as a grant that never matches; --allow-unknown grants
to a device or group not enrolled yet, or a service its profile will gain.`
	c.Flags().BoolVar(&allowUnknown, "allow-unknown", false, "grant to a device or group not enrolled yet, or a service the device does not have yet")
	return c
}

func ungrantCmd(g *globals) *cobra.Command {
	return grantChangeCmd(g, "no longer permit", &cobra.Command{
		Use:   "ungrant (--user NAME | --group NAME | --account NAME) (DEVICE | @DEVICEGROUP | @all) (ALIAS | '*' | +telemetry | +command | +manage | +view | +operate | +admin)",
		Short: "Remove a permission; new connections are refused at once",
	}, "removed", func(gr registry.Grant) control.Change { return control.RemoveGrant{Grant: gr} })
}

// grantChangeCmd completes c: parse the principal and target, take the change.
func grantChangeCmd(g *globals, verb string, c *cobra.Command, done string, change func(registry.Grant) control.Change) *cobra.Command {
	var p principalFlags
	c.Args = cobra.ExactArgs(2)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		gr, err := p.grant(args)
		if err != nil {
			return err
		}
		a, err := g.change(cmd, change(gr))
		if err != nil {
			return err
		}
		if a.Grant != nil {
			gr = *a.Grant
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", done, gr)
		if !a.HubRunning {
			fmt.Fprintln(cmd.OutOrStdout(), noHubNote)
		}
		return nil
	}
	p.add(c, verb)
	return c
}

func grantsCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "grants",
		Short: "List permissions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				gs, err := reg.Grants(cmd.Context())
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), gs)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KIND\tNAME\tID\tTARGET\tALIAS")
				for _, x := range gs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", x.Kind, x.Name, x.XID, x.Target, x.Alias)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}
