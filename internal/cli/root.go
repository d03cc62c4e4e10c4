package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/cli/agentcmd"
	"github.com/iotsafe/iotsafe/internal/cli/labcmd"
	"github.com/iotsafe/iotsafe/internal/cli/service"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

type globals struct {
	data   string
	config string
}

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := rootCmd(&globals{})
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		service.PrintError(stderr, "iotsafe", err)
		return exitStatus(err)
	}
	return 0
}

// rootCmd is the whole command tree over g.
func rootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "iotsafe",
		Short: "Secure IoT device fleets over SSH, without touching their firmware",
		Long: `iotsafe carries each device's plain HTTP/MQTT over one SSH session to a hub, which
exposes device services on protected local sockets (paper: IoTsafe, IEEE Access 2019).

Roles: 'iotsafe hub' runs the host server; 'iotsafe agent' runs on a device (stock
ssh and dbclient work as agents too); the other commands administer the hub.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	def := os.Getenv("IOTSAFE_DATA")
	if def == "" {
		def = hub.DefaultData
	}
	root.PersistentFlags().StringVar(&g.data, "data", def, "data folder of the hub (registry, keys, admin socket); env IOTSAFE_DATA")
	root.PersistentFlags().StringVar(&g.config, "config", "", "hub config file (default DATA/hub.yaml if present)")
	root.AddCommand(hubCmd(g), scanCmd(g), deviceCmd(g), jwtCmd(g), profileCmd(g), eventsCmd(g), agentcmd.Command(), connectCmd(g), demoCmd(g),
		grantCmd(g), ungrantCmd(g), grantsCmd(g), poolCmd(g), resolveCmd(g), accountCmd(g), frontdoorCmd(g), statusCmd(g), mqttCmd(g), soapCmd(g), registryCmd(g),
		backupCmd(g), restoreCmd(g), hostkeyCmd(g), initCmd(g), labcmd.Command())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command group below the root (device, hostkey,
// ...) refuse a word that is none of its subcommands, with a suggestion, and exit
// non-zero: cobra only does so at the root, and elsewhere prints the group's help and
// exits 0, so 'iotsafe device rm dev1' would look as if it had worked. A group called
// alone still prints its help.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		refuseUnknownSubcommands(c)
		c.SuggestFor = append(c.SuggestFor, synonyms[c.Name()]...)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.SuggestionsMinimumDistance = 2
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := slices.Compact(slices.Sorted(slices.Values(cmd.SuggestionsFor(args[0])))); len(s) > 0 {
				msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
			}
			return fmt.Errorf("%s\n\nRun '%s --help' for its commands", msg, cmd.CommandPath())
		}
	}
}

// synonyms are words other tools use for a subcommand: suggested, never run.
var synonyms = map[string][]string{
	"remove": {"rm", "delete", "del"},
	"list":   {"ls"},
	"show":   {"get", "describe", "inspect"},
	"add":    {"create", "new", "rotate"},
	"revoke": {"disable", "block"},
}

// Exit statuses other than 0 and 1 (sysexits.h), so that a service manager or a script
// can tell a failure that needs the operator from one that passes by itself: the hub's
// unit retries every failure but a wrong configuration (RestartPreventExitStatus=78).
const (
	// exitTempFail: the registry is held by another hub of the same name (or, for an
	// admin command that needs it alone, by a serving hub); trying again later may work.
	exitTempFail = 75
	// exitConfig: hub.yaml (or the file --config names) is wrong; nothing changes until
	// someone edits it.
	exitConfig = 78
)

// exitStatus is the process's exit status for a command that failed with err.
func exitStatus(err error) int {
	switch {
	case errors.Is(err, hub.ErrConfig):
		return exitConfig
	case errors.Is(err, registry.ErrInUse), errors.Is(err, registry.ErrLeaseLost):
		return exitTempFail
	default:
		return 1
	}
}

// openRegistry opens the hub's registry for an admin command.
func (g *globals) openRegistry(ctx context.Context) (*registry.Registry, hub.Config, error) {
	cfg, err := hub.LoadConfig(g.config, g.data)
	if err != nil {
		return nil, cfg, err
	}
	if err := g.needRegistry(cfg); err != nil {
		return nil, cfg, err
	}
	// The registry's recorded pool wins; a config naming another one is an error.
	r, err := registry.Open(ctx, cfg.RegistryLocation(g.data), cfg.Pool)
	return r, cfg, err
}

// needRegistry refuses an admin command on a data folder that holds no registry (a
// mistyped or forgotten --data): opening one there would create an empty fleet, into
// which a 'device add' would enrol and where a 'device revoke' of a stolen device would
// find nothing. Only 'iotsafe hub' and 'iotsafe init' create a data folder. A registry in
// PostgreSQL (registry.dsn) is the database's to have.
func (g *globals) needRegistry(cfg hub.Config) error {
	if cfg.Registry.DSN != "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(g.data, registry.FileName)); err == nil {
		return nil
	}
	where, _ := filepath.Abs(g.data)
	return fmt.Errorf("%w: %s holds no hub (no %s); name the hub's data folder with --data or IOTSAFE_DATA, or create one with 'iotsafe init --data %s' (a hub's first start also does)",
		errNoData, where, registry.FileName, g.data)
}

// errNoData is an admin command run on a folder that is no hub's.
var errNoData = errors.New("no hub data folder")

// withRegistry runs fn with the hub's registry open.
func (g *globals) withRegistry(cmd *cobra.Command, fn func(*registry.Registry) error) error {
	reg, _, err := g.openRegistry(cmd.Context())
	if err != nil {
		return err
	}
	defer reg.Close()
	return fn(reg)
}

func (g *globals) adminSocket() string { return g.data + "/" + admin.SocketName }

func (g *globals) resolverSocket() string { return g.data + "/" + resolver.SocketName }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
