package cli

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

func profileCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "profile", Short: "Manage device profiles (IoTProfile: allowed forwards and limits)"}
	var outFmt *output
	list := &cobra.Command{
		Use: "list", Short: "List profiles", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				ps, err := reg.Profiles(cmd.Context())
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), ps)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PROFILE\tREVERSE\tDIRECT\tSESSIONS\tFORWARDS\tCHANNELS\tON VIOLATION")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s after %d\n", p.Name, profileAliases(p.Reverse), profileAliases(p.Direct), p.MaxSessions, p.MaxForwards, p.MaxChannels, p.OnViolation.Action, p.OnViolation.After)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(list)
	var restart bool
	add := &cobra.Command{
		Use: "add FILE", Short: "Store (or replace) a profile from a YAML file", Args: cobra.ExactArgs(1),
		Long: `Store a profile, or replace the one of that name. Live sessions keep the version they
logged in with and new sessions take the new one, unless --restart-sessions: then every
hub closes the sessions that use the profile at once, and they come back under the new
version (an agent reconnects within seconds; a device behind a gateway is announced again
by its gateway). Use it when a profile is tightened (an alias withdrawn, a limit lowered).
The change is recorded in the audit log (profile_stored, or profile_applied).`,
		Example: `  iotsafe profile add docs/examples/camera-profile.yaml
  iotsafe profile add camera-profile.yaml --restart-sessions   # tightened: apply it now`,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			p, err := profile.Parse(b)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			a, err := g.change(cmd, control.PutProfile{Spec: string(b), Restart: restart})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case !restart:
				fmt.Fprintf(out, "stored profile %s (applies to new sessions; --restart-sessions applies it to live ones now)\n", p.Name)
			case a.HubRunning:
				fmt.Fprintf(out, "stored profile %s; closed %d live session(s) that used it: they come back under it\n", p.Name, a.Closed)
			default:
				fmt.Fprintf(out, "stored profile %s\n", p.Name)
			}
			if !a.HubRunning && restart {
				fmt.Fprintln(cmd.ErrOrStderr(), noHubNote)
			}
			return nil
		},
	}
	add.Flags().BoolVar(&restart, "restart-sessions", false, "also close the live sessions that use the profile, on every hub, so they come back under the new version")
	show := &cobra.Command{
		Use: "show NAME", Short: "Print a profile as YAML", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				p, err := reg.Profile(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(p.Marshal())
				return err
			})
		},
	}
	c.AddCommand(list, add, show)
	return c
}

// profileAliases is a profile's aliases as "alias=target" in name order, "-" for none:
// reverse aliases with their port (0: any), direct ones with their target.
func profileAliases[V any](m map[string]V) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, ",")
}
