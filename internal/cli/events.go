package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/registry"
)

func eventsCmd(g *globals) *cobra.Command {
	var f registry.EventFilter
	var asJSON bool
	c := &cobra.Command{
		Use:   "events",
		Short: "Show the audit log: sessions, refusals, violations, revocations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				ev, err := reg.Events(cmd.Context(), f)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), ev)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TIME\tDEVICE\tKIND\tREMOTE\tDETAIL")
				for _, e := range ev {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(time.DateTime), printable(e.Device), e.Kind, printable(e.Remote), printable(e.Detail))
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().StringVar(&f.Device, "device", "", "only this device")
	c.Flags().StringVar(&f.Kind, "kind", "", "only this kind (session_open, violation, revoked, auth_refused, takeover, ...)")
	c.Flags().IntVar(&f.Limit, "limit", 1000, "newest N events")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
