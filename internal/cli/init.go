package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// initCmd is 'iotsafe init': a data folder with an empty registry, for enrolling a fleet
// before the hub's first start. The other admin commands never create one.
func initCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:         "init",
		Annotations: map[string]string{createsData: ""},
		Short:       "Create a hub's data folder and its empty registry (before enrolling devices offline)",
		Long: `Create the data folder (mode 0711) and an empty registry in it, with the pool of
addresses hub.yaml names (pool.cidr), so devices can be enrolled before the hub first
starts ('iotsafe device import' with no hub running). A hub's first start does the same;
every other admin command refuses a folder that holds no hub, so a mistyped --data never
becomes a new, empty fleet. On a folder that already holds a registry it changes nothing.`,
		Example: "  iotsafe init --data /var/lib/iotsafe && iotsafe device import fleet.txt --data /var/lib/iotsafe",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := hub.LoadConfig(g.config, g.data)
			if err != nil {
				return err
			}
			where, _ := filepath.Abs(g.data)
			if cfg.Registry.DSN == "" {
				if _, err := os.Stat(filepath.Join(g.data, registry.FileName)); err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s already holds a hub's registry: nothing to do\n", where)
					return nil
				}
				if err := os.MkdirAll(g.data, 0o711); err != nil {
					return fmt.Errorf("data folder: %w", err)
				}
			}
			reg, err := registry.Open(cmd.Context(), cfg.RegistryLocation(g.data), cfg.Pool)
			if err != nil {
				return err
			}
			pool := reg.Pool().Config().CIDR
			reg.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "initialised %s: registry %s, pool %s\nnext: enroll devices ('iotsafe device add NAME --keygen DIR --data %s') and start the hub ('iotsafe hub --data %s')\n",
				where, reg.Where(), pool, g.data, g.data)
			return nil
		},
	}
}
