package cli

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

func profileCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "profile", Short: "Manage device profiles (IoTProfile: allowed forwards and limits)"}
	var asJSON bool
	list := &cobra.Command{
		Use: "list", Short: "List profiles", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				ps, err := reg.Profiles(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), ps)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PROFILE\tREVERSE\tDIRECT\tSESSIONS\tFORWARDS\tCHANNELS\tON VIOLATION")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%v\t%v\t%d\t%d\t%d\t%s after %d\n", p.Name, p.Reverse, p.Direct, p.MaxSessions, p.MaxForwards, p.MaxChannels, p.OnViolation.Action, p.OnViolation.After)
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	add := &cobra.Command{
		Use: "add FILE", Short: "Store (or replace) a profile from a YAML file", Args: cobra.ExactArgs(1),
		Example: "  iotsafe profile add docs/examples/camera-profile.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			p, err := profile.Parse(b)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				if err := reg.PutProfile(cmd.Context(), p); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stored profile %s (applies to new sessions)\n", p.Name)
				return nil
			})
		},
	}
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
