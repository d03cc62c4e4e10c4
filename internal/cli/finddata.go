package cli

import (
	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/hub"
)

// dataHelp is 'iotsafe help data': how a command finds the hub it administers.
func dataHelp() *cobra.Command {
	return &cobra.Command{
		Use:   "data",
		Short: "How commands find the hub's data folder (and its hub.yaml)",
		Long: `Every admin command works on one hub's data folder (registry, keys, admin socket).
It uses the first of:

  1. --data DIR
  2. the environment variable IOTSAFE_DATA
  3. ./iotsafe-data, if it holds a hub (registry.db, hub.yaml or admin.sock)
  4. the hub that is running: each hub announces its folder in $XDG_RUNTIME_DIR/iotsafe
     (/run/iotsafe for root, which operators in admin.group read too); if several
     are running, name one
  5. /var/lib/iotsafe, the systemd unit's folder, if it holds a hub

A folder from 1 or 2 is used as given. When none holds a hub, the command refuses and
says what it tried: only 'iotsafe hub', 'iotsafe init' and 'iotsafe demo' create a data
folder (with --data, IOTSAFE_DATA or ./iotsafe-data), so a mistyped folder never
becomes a new, empty fleet.

The configuration is --config FILE if given, else the file the running hub read, else
DIR/hub.yaml if it exists. What only the running hub knows (its listeners with ports
chosen at start, its front door's name) is asked of it over the admin socket.`,
	}
}

// loadConfig is the hub's configuration for an admin command: --config, else the file
// the running hub read (it may have been started with --config elsewhere), else
// DATA/hub.yaml.
func (g *globals) loadConfig() (hub.Config, error) {
	path := g.config
	if path == "" {
		if info := g.runningHub(); info != nil {
			path = info.ConfigFile
		}
	}
	return hub.LoadConfig(path, g.data)
}

// runningHub describes the hub serving the data folder, or nil when none answers. It asks
// once per command: loadConfig runs for every registry the command opens.
func (g *globals) runningHub() *admin.HubInfo {
	if g.hubAsked || g.findErr != nil {
		return g.hub
	}
	g.hubAsked = true
	if rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpInfo}); err == nil && rep.OK {
		g.hub = rep.Hub
	}
	return g.hub
}
