// Command iotsafe-agent is the device agent alone: the same command as 'iotsafe agent',
// without the hub, the admin tool and the lab, so that it fits a device's flash
// ('make agents' builds it for the usual device architectures).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/iotsafe/iotsafe/internal/cli/agentcmd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := agentcmd.Main(ctx, os.Args[1:], version, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
