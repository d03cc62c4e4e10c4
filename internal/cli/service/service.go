package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/sdnotify"
)

// NotifierFromEnv is the service manager's notifier for this process (one that sends
// nothing outside a manager). It removes the variables from the environment first, so
// no child process (an nft, a psql) ever speaks for the hub or the agent.
func NotifierFromEnv() (*sdnotify.Notifier, error) {
	vars := []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
	vals := make([]string, len(vars))
	for i, v := range vars {
		vals[i] = os.Getenv(v)
		os.Unsetenv(v)
	}
	return sdnotify.New(vals[0], vals[1], vals[2], os.Getpid())
}

// ManagerUnreachable is what the hub and the agent do when a notification to the service
// manager fails: warn once (a manager that went away would otherwise fill the log).
func ManagerUnreachable(log *slog.Logger) func(error) {
	var once sync.Once
	return func(err error) {
		once.Do(func() { log.Warn("telling the service manager failed", "err", err) })
	}
}

// OnJournal reports whether w is systemd's journal: $JOURNAL_STREAM names the device
// and inode of the stream systemd connected (systemd.exec(5)). A process whose output
// was redirected elsewhere still inherits the variable, so w itself is compared.
func OnJournal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	var dev, ino uint64
	if _, err := fmt.Sscanf(os.Getenv("JOURNAL_STREAM"), "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// IgnoreCanceled is err, or nil for a cancelled context: a command stopped by an
// interrupt or SIGTERM ends cleanly.
func IgnoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// PrintError writes the line saying why the command name failed; in the journal at
// error priority, since the reason a service failed to start is what 'journalctl -p err'
// must show (plain lines are taken as info).
func PrintError(w io.Writer, name string, err error) {
	prefix := ""
	if OnJournal(w) {
		prefix = "<3>"
	}
	fmt.Fprintln(w, prefix+name+":", err)
}
