package cli

import (
	"cmp"
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
	"github.com/iotsafe/iotsafe/internal/hubfind"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/resolver"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

type globals struct {
	data   string
	config string
	// found says how the data folder was found (hubfind.Locate); findErr is why none
	// was, for the commands that need one.
	found   hubfind.Found
	findErr error
	// hub is what the running hub said of itself, asked once (runningHub).
	hub      *admin.HubInfo
	hubAsked bool
}

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{}
	root := rootCmd(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		err = g.whereNotFound(err)
		service.PrintError(stderr, "iotsafe", err)
		return exitStatus(err)
	}
	return 0
}

// whereNotFound names the hub a "not found" came from: with a hub found by itself, the
// operator may not be looking at the fleet they think.
func (g *globals) whereNotFound(err error) error {
	if !errors.Is(err, registry.ErrNotFound) || g.found.Dir == "" {
		return err
	}
	where, _ := filepath.Abs(g.found.Dir)
	return fmt.Errorf("%w (in the hub at %s, found by %s)", err, where, g.found.How)
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
	root.PersistentFlags().StringVar(&g.data, "data", "", "data folder of the hub (registry, keys, admin socket); default: found (see 'iotsafe help data')")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		g.locate(cmd)
		if cmd.HasSubCommands() || annotated(cmd, worksWithoutHub) || cobraOwn(cmd) {
			return nil // a group's help, a command that finds a hub only if asked to
		}
		return g.needData()
	}
	root.PersistentFlags().StringVar(&g.config, "config", "", "hub config file (default DATA/hub.yaml if present)")
	root.AddCommand(hubCmd(g), scanCmd(g), deviceCmd(g), jwtCmd(g), profileCmd(g), eventsCmd(g), agentcmd.Command(), connectCmd(g), demoCmd(g),
		grantCmd(g), ungrantCmd(g), grantsCmd(g), poolCmd(g), resolveCmd(g), accountCmd(g), frontdoorCmd(g), statusCmd(g), mqttCmd(g), soapCmd(g), registryCmd(g),
		tokenCmd(g), caCmd(g),
		groupKindCmd(g, registry.GroupNetwork, "Networks", "  iotsafe network add plant-a --description 'the first plant'\n  iotsafe device set-groups dev42 network:plant-a\n  iotsafe grant --account team-a @network:plant-a +telemetry"),
		groupKindCmd(g, registry.GroupDeviceType, "Device types", "  iotsafe devicetype add thermostat\n  iotsafe device set-groups dev42 network:plant-a devicetype:thermostat"),
		backupCmd(g), restoreCmd(g), hostkeyCmd(g), initCmd(g), doctorCmd(g), labcmd.Command(), dataHelp())
	for _, c := range root.Commands() {
		switch c.Name() {
		case "agent", "scan", "soap":
			c.Annotations = map[string]string{worksWithoutHub: ""}
		}
	}
	groupCommands(root)
	refuseUnknownSubcommands(root)
	root.SetFlagErrorFunc(flagError)
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

// commandGroups sections 'iotsafe --help' by what an operator is doing, so that the
// commands that change who may reach what (grant, ungrant, grants) sit beside the ones
// that stop a device or an account, and not alphabetically among the hub's.
var commandGroups = []struct {
	id, title string
	commands  []string
}{
	{"hub", "Run and look after the hub:", []string{"hub", "init", "status", "doctor", "events", "backup", "restore", "hostkey", "pool", "registry", "demo"}},
	{"fleet", "Devices and what they may do:", []string{"device", "token", "ca", "network", "devicetype", "profile", "mqtt", "soap"}},
	{"access", "Who may reach which device service:", []string{"grant", "ungrant", "grants", "account", "frontdoor", "jwt", "resolve", "connect"}},
	{"device", "On a device:", []string{"agent"}},
	{"measure", "Measure and check:", []string{"scan", "bench"}},
}

// groupCommands puts every top-level command in its help section.
func groupCommands(root *cobra.Command) {
	byName := map[string]string{}
	for _, g := range commandGroups {
		root.AddGroup(&cobra.Group{ID: g.id, Title: g.title})
		for _, n := range g.commands {
			byName[n] = g.id
		}
	}
	for _, c := range root.Commands() {
		c.GroupID = byName[c.Name()]
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
	cfg, err := g.loadConfig()
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

// createsData marks the commands that may make a data folder where none is ('iotsafe
// hub', 'init', 'demo'): they use --data, IOTSAFE_DATA or ./iotsafe-data as given.
const createsData = "creates-data"

// worksWithoutHub marks commands (and trees: agent) that do not administer a hub, or
// only with a flag that then checks for one (scan --hub, soap send without --url).
const worksWithoutHub = "works-without-hub"

// annotated reports whether cmd or a command above it carries the annotation.
func annotated(cmd *cobra.Command, key string) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if _, ok := c.Annotations[key]; ok {
			return true
		}
	}
	return false
}

// cobraOwn reports whether cmd is one cobra adds at run time (help, completion and
// the shell completion's hidden callbacks).
func cobraOwn(cmd *cobra.Command) bool {
	for c := cmd; c != nil && c.HasParent(); c = c.Parent() {
		switch c.Name() {
		case "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return true
		}
	}
	return false
}

// locate sets the data folder of the command: where it creates one, or the hub it
// administers (hubfind.Locate); a command that needs a hub and found none refuses with
// g.findErr, naming what was tried.
func (g *globals) locate(cmd *cobra.Command) {
	set := cmd.Flags().Changed("data")
	if annotated(cmd, createsData) {
		if !set {
			g.data = cmp.Or(os.Getenv(hubfind.EnvData), hubfind.Default)
		}
		return
	}
	g.found, g.findErr = hubfind.Locate(g.data, set)
	g.data = cmp.Or(g.found.Dir, hubfind.Default)
}

// needData refuses a command that needs a hub's data folder when none was found.
func (g *globals) needData() error {
	return g.findErr // wraps errNoData
}

// needRegistry refuses an admin command on a data folder that holds no registry (a
// mistyped or forgotten --data): opening one there would create an empty fleet, into
// which a 'device add' would enrol and where a 'device revoke' of a stolen device would
// find nothing. Only 'iotsafe hub' and 'iotsafe init' create a data folder. A registry in
// PostgreSQL (registry.dsn) is the database's to have.
func (g *globals) needRegistry(cfg hub.Config) error {
	if err := g.needData(); err != nil {
		return err
	}
	if cfg.Registry.DSN != "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(g.data, registry.FileName)); err == nil {
		return nil
	}
	where, _ := filepath.Abs(g.data)
	return fmt.Errorf("%w: %s (%s) holds no hub (no %s); name the hub's data folder with --data or IOTSAFE_DATA, or create one with 'iotsafe init --data %s' (a hub's first start also does)",
		errNoData, where, g.found.How, registry.FileName, g.data)
}

// errNoData is an admin command run where no hub is.
var errNoData = hubfind.ErrNone

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
