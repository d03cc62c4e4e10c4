package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// groupKindCmd is 'iotsafe network' or 'iotsafe devicetype': DeviceHive's networks and
// device types, which are device groups named KIND:NAME with a numeric id.
func groupKindCmd(g *globals, kind, title, example string) *cobra.Command {
	c := &cobra.Command{
		Use:   kind,
		Short: title + " (DeviceHive's): device groups " + kind + ":NAME with the ids its API uses",
		Long: title + ` are DeviceHive's, and here device groups named ` + kind + `:NAME: a device is in one at
most ('iotsafe device set-groups DEVICE ` + kind + `:NAME', 'device add --group', or PUT
/api/rest/device/{id} with its ` + map[string]string{registry.GroupNetwork: "networkId", registry.GroupDeviceType: "deviceTypeId"}[kind] + `), grants name it as any group
(@` + kind + `:NAME), and the REST and WebSocket APIs list, filter and subscribe by its id.
One is made with its first device, or empty with 'add'.`,
		Example: example,
	}
	c.AddCommand(groupKindAddCmd(g, kind), groupKindListCmd(g, kind), groupKindRemoveCmd(g, kind))
	return c
}

func groupKindAddCmd(g *globals, kind string) *cobra.Command {
	var description string
	var outFmt *output
	c := &cobra.Command{
		Use:   "add NAME",
		Short: "Make a " + kind + " with no device yet; prints its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.change(cmd, control.AddGroupInfo{Kind: kind, Name: args[0], Description: description})
			if err != nil {
				return err
			}
			if outFmt.structured() {
				return outFmt.print(cmd.OutOrStdout(), a.Group)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: id %d\n", kind, args[0], a.Group.ID)
			return nil
		},
	}
	c.Flags().StringVar(&description, "description", "", "what it is, for DeviceHive's clients")
	outFmt = addOutput(c)
	return c
}

func groupKindListCmd(g *globals, kind string) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "list",
		Short: "List the " + kind + "s with their ids",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				gis, err := reg.GroupInfos(cmd.Context(), kind)
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), gis)
				}
				members, err := reg.DeviceGroups(cmd.Context())
				if err != nil {
					return err
				}
				count := map[string]int{}
				for _, gs := range members {
					for _, grp := range gs {
						count[grp]++
					}
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tGROUP\tDEVICES\tDESCRIPTION")
				for _, gi := range gis {
					fmt.Fprintf(tw, "%d\t%s\t@%s\t%d\t%s\n", gi.ID, gi.Name, gi.Group, count[gi.Group], gi.Description)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func groupKindRemoveCmd(g *globals, kind string) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a " + kind + " that has no device (move its devices out first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.change(cmd, control.RemoveGroupInfo{Group: kind + ":" + args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s removed\n", kind, args[0])
			return nil
		},
	}
}
