package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/iotsafe/iotsafe/internal/cli/service"
	"github.com/iotsafe/iotsafe/internal/cpuprofile"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/hubfind"
	"github.com/iotsafe/iotsafe/internal/logging"
	"github.com/iotsafe/iotsafe/internal/sdnotify"
)

func hubCmd(g *globals) *cobra.Command {
	var cpuProfile, readyFile string
	var checkConfig, announce bool
	c := &cobra.Command{
		Use:         "hub",
		Annotations: map[string]string{createsData: ""},
		Short:       "Run the hub: SSH server for devices, protected sockets, admin socket",
		Long: `Run the hub. The first start creates the data folder (mode 0711), an ed25519 host
key and the SQLite registry, and prints the host key fingerprint that agents pin.
SIGTERM or Ctrl-C stops it cleanly; SIGHUP reloads the log level and keepalive timings.

Under systemd (Type=notify; dist/systemd/iotsafe-hub.service) the hub says when it is
ready, reloading and stopping, keeps a status line (devices online, forwarded
connections, a degraded registry, a refused reload) and answers the watchdog (WatchdogSec=) while its sessions
can be read: a hub that hangs is killed, with every goroutine's stack in the journal,
and restarted. Exit status: 78 for a wrong hub.yaml (a service manager should not
retry it), 75 when another hub of the same name holds the registry, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if checkConfig {
				return checkHubConfig(cmd, g)
			}
			return runHub(cmd, g, hubRun{readyFile: readyFile, cpuProfile: cpuProfile, announce: announce})
		},
	}
	c.Flags().StringVar(&readyFile, "ready-file", "", "once every listener is up, write FILE (JSON: pid, addresses, host keys, the front door's CA); removed at a clean stop")
	c.Flags().BoolVar(&checkConfig, "check-config", false, "check the configuration as a start or a reload would (hub.yaml's settings and their weak choices), print the result and exit: 78 if the hub would refuse it; touches nothing")
	c.Flags().BoolVar(&announce, "announce", true, "announce the data folder to admin commands run elsewhere ('iotsafe help data'); the lab's hubs do not")
	c.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile to FILE until the hub stops (for 'go tool pprof')")
	return c
}

// runHub is 'iotsafe hub': start, say where it listens, serve until a signal or a
// failure, reload on SIGHUP.
func runHub(cmd *cobra.Command, g *globals, o hubRun) error {
	readyFile, cpuProfile := o.readyFile, o.cpuProfile
	// Before anything can announce the hub ready: a SIGHUP that arrives between the
	// ready file and a later Notify would kill the hub (SIGHUP's default). Signals
	// during start wait in the channel until serveHub.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sig)
	// Read (and cleared) before anything could start a child process.
	notify, notifyErr := service.NotifierFromEnv()
	cfg, err := hub.LoadConfig(g.config, g.data)
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		stop, err := cpuprofile.Start(cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg.Log.Journal = service.OnJournal(cmd.ErrOrStderr())
	log, level := logging.New(cfg.Log, cmd.ErrOrStderr())
	if notifyErr != nil {
		log.Warn("the service manager's notification settings are unusable; running without them", "err", notifyErr)
	}
	h, err := hub.Start(cmd.Context(), cfg, hub.Options{DataDir: g.data, Logger: log, Level: level, Version: Version, ReadyFile: readyFile})
	if err != nil {
		return err
	}
	defer h.Close()
	printHubStart(cmd.OutOrStdout(), h)
	if readyFile != "" {
		// Before the last line: whoever waits for that line finds the file.
		if err := hub.WriteReadyFile(readyFile, h.Ready()); err != nil {
			return err
		}
		defer os.Remove(readyFile)
	}
	if o.announce {
		defer announceHub(g.data, log)()
	}
	fmt.Fprintf(cmd.OutOrStdout(), "hub listening for devices on %s (data %s)\n", h.SSHAddr(), g.data)
	log.Info("hub ready", "ssh", h.SSHAddr().String(), "data", g.data)
	sm := superviseHub(cmd.Context(), h, notify, log)
	defer sm.stop()
	return serveHub(cmd.Context(), g, h, sig, sm, notify, log)
}

// hubRun are the flags of 'iotsafe hub' that shape one run.
type hubRun struct {
	readyFile, cpuProfile string
	announce              bool
}

// announceHub tells admin commands run elsewhere where this hub's data folder is
// (hubfind); the returned function withdraws it. Failing to is no reason to stop.
func announceHub(data string, log *slog.Logger) (withdraw func()) {
	withdraw, err := hubfind.Announce(data)
	if err != nil {
		log.Warn("admin commands will not find this hub by themselves: name its folder with --data or IOTSAFE_DATA", "err", err)
		return func() {}
	}
	return withdraw
}

// printHubStart prints the host keys and where each listener is.
func printHubStart(w io.Writer, h *hub.Hub) {
	for _, k := range h.HostKeys() {
		fmt.Fprintf(w, "host key %s %s\n", k.Type(), ssh.FingerprintSHA256(k))
	}
	for _, k := range h.NextHostKeys() {
		fmt.Fprintf(w, "next host key %s %s (announced to devices; 'iotsafe hostkey list')\n", k.Type(), ssh.FingerprintSHA256(k))
	}
	// What a stock OpenSSH client puts in its known_hosts (StrictHostKeyChecking=yes).
	addr := knownHostsAddr(h.SSHAddr())
	for _, k := range h.HostKeys() {
		fmt.Fprintf(w, "known_hosts line: %s\n", knownhosts.Line([]string{addr}, k))
	}
	for _, l := range h.Listeners() {
		if l.Says != "" {
			fmt.Fprintf(w, l.Says+"\n", l.Addr)
		}
	}
}

// knownHostsAddr is the hub's SSH address as a device names it in known_hosts: a
// wildcard listen address becomes HUB, for the name devices use.
func knownHostsAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "HUB"
	}
	return net.JoinHostPort(host, port)
}

// serveHub waits for the end (the context, a failure, SIGTERM or SIGINT) and reloads
// the configuration on SIGHUP.
func serveHub(ctx context.Context, g *globals, h *hub.Hub, sig <-chan os.Signal, sm *hubSupervision, notify *sdnotify.Notifier, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			sm.stopping("stopping")
			return nil
		case err := <-h.Failed():
			log.Error("stopping: this hub can no longer serve safely", "err", err)
			sm.stopping(fmt.Sprintf("stopping: %v", err))
			return err
		case s := <-sig:
			if s != syscall.SIGHUP {
				log.Info("shutting down", "signal", s.String())
				sm.stopping("stopping on " + s.String())
				return nil
			}
			notify.Reloading()
			nc, err := hub.LoadConfig(g.config, g.data)
			if err == nil {
				err = h.Reload(nc)
			}
			if err != nil {
				log.Error("reload refused; keeping the running configuration", "err", err)
			}
			sm.reloaded(err)
		}
	}
}

// checkHubConfig is 'iotsafe hub --check-config': what a start or a reload would say
// of the configuration, without a hub (systemd's ExecReload runs it first, and
// configuration management before it puts a new hub.yaml in place).
func checkHubConfig(cmd *cobra.Command, g *globals) error {
	cfg, err := hub.LoadConfig(g.config, g.data)
	if err != nil {
		return err
	}
	weak, err := cfg.Validate()
	if err != nil {
		return fmt.Errorf("configuration %s: %w: %v", cfg.Source, hub.ErrConfig, err)
	}
	for _, w := range weak {
		fmt.Fprintf(cmd.OutOrStdout(), "warning: insecure setting (the hub would warn at start): %s\n", w)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "configuration %s: ok\n", cfg.Source)
	return nil
}

// hubSupervision keeps the service manager told about a running hub.
type hubSupervision struct {
	h      *hub.Hub
	notify *sdnotify.Notifier
	cancel context.CancelFunc
	done   chan struct{}
	// refused is the last refused reload's error, shown in the status line until a
	// reload succeeds: the log is not where an operator looks after 'systemctl reload'.
	refused atomic.Pointer[string]
}

// superviseHub says the hub is ready and starts the status line and watchdog
// keep-alives, every 10 s or as the watchdog interval needs; nothing without a manager.
func superviseHub(ctx context.Context, h *hub.Hub, notify *sdnotify.Notifier, log *slog.Logger) *hubSupervision {
	sm := &hubSupervision{h: h, notify: notify, done: make(chan struct{})}
	ctx, sm.cancel = context.WithCancel(ctx)
	failed := service.ManagerUnreachable(log)
	if err := notify.Ready(sm.status()); err != nil {
		failed(err)
	}
	go func() {
		defer close(sm.done)
		notify.Keep(ctx, 10*time.Second, func() (string, error) { return sm.status(), nil }, failed)
	}()
	return sm
}

// status is the hub's status line; reading it takes the session tables' locks, so the
// watchdog's keep-alives stop if those hang.
func (sm *hubSupervision) status() string {
	s := sm.h.ServiceStatus()
	if r := sm.refused.Load(); r != nil {
		s += "; last reload refused: " + *r
	}
	return s
}

// reloaded ends a reload (err: refused).
func (sm *hubSupervision) reloaded(err error) {
	if err != nil {
		msg := err.Error()
		sm.refused.Store(&msg)
	} else {
		sm.refused.Store(nil)
	}
	sm.notify.Ready(sm.status())
}

// stopping tells the manager the hub is going down; the keep-alives stop.
func (sm *hubSupervision) stopping(why string) {
	sm.stop()
	sm.notify.Stopping(why)
}

func (sm *hubSupervision) stop() {
	sm.cancel()
	<-sm.done
}
