// Command iotsafe is the hub, the device agent, the admin tool and the lab in one binary.
// Called as iotsafe-agent (a link 'make install' makes) it is the agent alone, as the
// slim binary of cmd/iotsafe-agent is, so one systemd unit serves both.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/iotsafe/iotsafe/internal/cli"
	"github.com/iotsafe/iotsafe/internal/cli/agentcmd"
)

func main() {
	// The hub handles its own signals (SIGHUP reloads); for every other command an
	// interrupt cancels the context so deferred cleanup runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	if filepath.Base(os.Args[0]) == "iotsafe-agent" {
		code = agentcmd.Main(ctx, os.Args[1:], cli.Version, os.Stdout, os.Stderr)
	} else {
		code = cli.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}
