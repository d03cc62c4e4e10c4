package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/registry"
)

func eventsCmd(g *globals) *cobra.Command {
	var f registry.EventFilter
	var follow bool
	var outFmt *output
	c := &cobra.Command{
		Use:   "events",
		Short: "Show the audit log: sessions, refusals, violations, revocations",
		Long: `Show the newest events of the audit log (--limit), oldest first. With --follow it
goes on printing new events as they are recorded (read each second) until Ctrl-C; with
-o json it then prints one JSON object per line (-o yaml: one document each).`,
		Example: `  iotsafe events --device dev42
  iotsafe events --kind violation --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				ev, err := reg.Events(cmd.Context(), f)
				if err != nil {
					return err
				}
				p := eventPrinter{w: cmd.OutOrStdout(), out: outFmt, lines: follow}
				if err := p.print(ev, true); err != nil || !follow {
					return err
				}
				return followEvents(cmd.Context(), reg, f, ev, p)
			})
		},
	}
	c.Flags().StringVar(&f.Device, "device", "", "only this device")
	c.Flags().StringVar(&f.Kind, "kind", "", "only this kind (session_open, violation, revoked, reinstated, auth_refused, takeover, ...)")
	c.Flags().IntVar(&f.Limit, "limit", 1000, "newest N events")
	outFmt = addOutput(c)
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until Ctrl-C")
	return c
}

// followEvents prints the events recorded after the last of seen, each second, until
// ctx ends (Ctrl-C): a clean end.
func followEvents(ctx context.Context, reg *registry.Registry, f registry.EventFilter, seen []registry.Event, p eventPrinter) error {
	if len(seen) > 0 {
		f.After = seen[len(seen)-1].ID
	} else {
		last, err := reg.Events(ctx, registry.EventFilter{Limit: 1})
		if err != nil {
			return err
		}
		if len(last) > 0 {
			f.After = last[0].ID
		}
	}
	f.Limit = 1000
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		ev, err := reg.Events(ctx, f)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if len(ev) > 0 {
			f.After = ev[len(ev)-1].ID
		}
		if err := p.print(ev, false); err != nil {
			return err
		}
	}
}

// eventPrinter prints events as a table, a JSON array, or JSON lines (lines).
type eventPrinter struct {
	w     io.Writer
	out   *output
	lines bool
}

func (p eventPrinter) print(ev []registry.Event, header bool) error {
	switch {
	case p.out.structured() && p.lines:
		for _, e := range ev {
			if err := p.out.printLine(p.w, e); err != nil {
				return err
			}
		}
		return nil
	case p.out.structured():
		return p.out.print(p.w, ev)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "TIME\tDEVICE\tKIND\tREMOTE\tDETAIL")
	}
	for _, e := range ev {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(time.DateTime), printable(e.Device), e.Kind, printable(e.Remote), printable(e.Detail))
	}
	return tw.Flush()
}
