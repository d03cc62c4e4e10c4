// Command iotsafe is the hub, the device agent, the admin tool and the lab in one binary.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/iotsafe/iotsafe/internal/cli"
)

func main() {
	// The hub handles its own signals (SIGHUP reloads); for every other command an
	// interrupt cancels the context so deferred cleanup runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cli.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
