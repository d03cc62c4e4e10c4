package cli

import (
	"os"

	"github.com/iotsafe/iotsafe/internal/sdnotify"
)

// notifierFromEnv is the service manager's notifier for this process (one that sends
// nothing outside a manager). It removes the variables from the environment first, so
// no child process (an nft, a psql) ever speaks for the hub or the agent.
func notifierFromEnv() (*sdnotify.Notifier, error) {
	vars := []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
	vals := make([]string, len(vars))
	for i, v := range vars {
		vals[i] = os.Getenv(v)
		os.Unsetenv(v)
	}
	return sdnotify.New(vals[0], vals[1], vals[2], os.Getpid())
}
