package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

func poolCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "pool",
		Short: "Show or move the reserved pool of protected addresses",
		Long: `The registry records the reserved pool at its first start; every hub and command that
opens it allocates from that pool, whatever configuration it was given. A configuration
that names another pool is refused until the pool is moved here, with the hub stopped.`,
	}
	var outFmt *output
	show := &cobra.Command{
		Use: "show", Short: "Print the pool the registry allocates from", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				pc := reg.Pool().Config()
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), pc)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "pool %s, ports from %d\n", pc.CIDR, pc.PortBase)
				return nil
			})
		},
	}
	outFmt = addOutput(show)
	var want sockets.Config
	var moveFmt *output
	move := &cobra.Command{
		Use:   "move",
		Short: "Make another range the pool and move every device outside it (the hub must be stopped)",
		Long: `Records the new pool and gives every device outside it a new address in it (and every
socket below the new port base a new port), in one transaction. Devices already inside keep
their addresses. Platform processes that kept socket addresses must ask the resolver again.
Run with no flags to move allocations written before the pool was recorded.`,
		Example: "  iotsafe pool move --cidr 127.79.0.0/16 --data /var/lib/iotsafe",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			if err := g.needRegistry(cfg); err != nil {
				return err
			}
			lock, err := hub.LockData(g.data)
			if err != nil {
				return fmt.Errorf("%w (the hub binds the sockets this command moves)", err)
			}
			defer lock.Release()
			// Open with the recorded pool: the config may already name the new one.
			reg, err := registry.Open(cmd.Context(), cfg.RegistryLocation(g.data), sockets.Config{})
			if err != nil {
				return err
			}
			defer reg.Close()
			lease, err := reg.LockMaintenance(cmd.Context(), commandHolder("pool move"))
			if err != nil {
				return fmt.Errorf("%w (the hub binds the sockets this command moves)", err)
			}
			defer lease.Release()
			moves, err := reg.MovePool(cmd.Context(), want)
			if err != nil {
				return err
			}
			if moveFmt.structured() {
				return moveFmt.print(cmd.OutOrStdout(), moves)
			}
			pc := reg.Pool().Config()
			for _, m := range moves {
				fmt.Fprintf(cmd.OutOrStdout(), "moved %s: %s -> %s", m.Device, m.From, m.To)
				for alias, p := range m.Sockets {
					fmt.Fprintf(cmd.OutOrStdout(), ", %s port %d -> %d", alias, p.From, p.To)
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s, ports from %d; %d devices moved\n", pc.CIDR, pc.PortBase, len(moves))
			return nil
		},
	}
	move.Flags().StringVar(&want.CIDR, "cidr", "", "the new reserved range (default: keep the recorded one)")
	move.Flags().IntVar(&want.PortBase, "port-base", 0, "the new first alias port (default: keep the recorded one)")
	moveFmt = addOutput(move)
	c.AddCommand(show, move)
	return c
}
