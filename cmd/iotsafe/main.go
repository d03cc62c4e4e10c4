// Command iotsafe is the hub, the device agent, the admin tool and the lab in one binary.
// Called as iotsafe-agent (a link 'make install' makes) it is the agent alone, as the
// slim binary of cmd/iotsafe-agent is, so one systemd unit serves both.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/iotsafe/iotsafe/internal/cli"
	"github.com/iotsafe/iotsafe/internal/cli/agentcmd"
)

func main() {
	smallStacks()
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

// smallStacks makes the hub start every goroutine with the smallest stack. By default
// the runtime starts them at the running average of the stacks it scans, and the hub's
// TLS and SSH handshakes are deep: every goroutine of an idle connection (two per MQTT
// client) then started at 8-16 KiB and kept it. A stack grows on demand anyway. The
// setting is only read from GODEBUG at start, so the hub executes itself again, once,
// with it added (same process id: a service manager sees nothing); an operator's own
// GODEBUG setting of it wins. Measured with 'iotsafe bench mqtt connections': 8 KiB less
// per idle MQTT connection (issue 54).
func smallStacks() {
	if len(os.Args) < 2 || (os.Args[1] != "hub" && os.Args[1] != "demo") || strings.Contains(os.Getenv("GODEBUG"), "adaptivestackstart=") {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	env := append(os.Environ(), "GODEBUG="+strings.TrimPrefix(os.Getenv("GODEBUG")+",adaptivestackstart=0", ","))
	syscall.Exec(self, os.Args, env) // returns only on failure: then run as we are
}
