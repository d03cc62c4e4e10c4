package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/cli/service"
	"github.com/iotsafe/iotsafe/internal/firewall"
	"github.com/iotsafe/iotsafe/internal/logging"
	"github.com/iotsafe/iotsafe/internal/sdnotify"
	"github.com/iotsafe/iotsafe/internal/strictyaml"
)

// agentFile is the agent's optional config file; flags override it.
type agentFile struct {
	Hub               string         `yaml:"hub"`
	Device            string         `yaml:"device"`
	Key               string         `yaml:"key"`
	HubKey            string         `yaml:"hub_key"`
	KnownHosts        string         `yaml:"known_hosts"`
	HubCA             string         `yaml:"hub_ca"`
	Certificate       string         `yaml:"certificate"`
	TrustOnFirstUse   bool           `yaml:"trust_on_first_use"`
	Expose            []string       `yaml:"expose"`
	Forward           []string       `yaml:"forward"`
	KeepaliveInterval time.Duration  `yaml:"keepalive_interval"`
	SandboxUID        int            `yaml:"sandbox_uid"`
	Coalesce          bool           `yaml:"coalesce"`
	Compress          bool           `yaml:"compress"`
	Multiplex         *bool          `yaml:"multiplex"` // nil: on
	Log               logging.Config `yaml:"log"`
}

// uidSandbox confines one uid to loopback with the agent's nftables table.
type uidSandbox struct {
	k   *firewall.Kernel
	uid uint32
}

func (s uidSandbox) Install() error { return s.k.InstallSandbox(s.uid) }
func (s uidSandbox) Remove() error  { return s.k.Remove() }
func (s uidSandbox) String() string { return fmt.Sprintf("uid %d may reach loopback only", s.uid) }

// Main runs the agent as a program of its own, iotsafe-agent (cmd/iotsafe-agent, or the
// full binary called by that name), and returns the process's exit status.
func Main(ctx context.Context, args []string, version string, stdout, stderr io.Writer) int {
	c := Command()
	c.Use = "iotsafe-agent"
	c.Version = version
	c.Example = strings.ReplaceAll(c.Example, "iotsafe agent", "iotsafe-agent")
	c.SilenceUsage, c.SilenceErrors = true, true
	c.SetArgs(args)
	c.SetOut(stdout)
	c.SetErr(stderr)
	if err := c.ExecuteContext(ctx); err != nil {
		service.PrintError(stderr, "iotsafe-agent", err)
		return 1
	}
	return 0
}

// Command is the agent's command line ('iotsafe agent', and the whole of the
// iotsafe-agent binary built for devices).
func Command() *cobra.Command {
	var f agentFile
	var file string
	var checkConfig bool
	multiplex := true
	f.Multiplex = &multiplex
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run on a device: keep one SSH session to the hub and carry local services over it",
		Long: `Run the device agent (SecurePX). It keeps one SSH session to the hub, exposes local
services through reverse forwards (--expose ALIAS=HOST:PORT) and reaches hub services
through direct forwards (--forward HOST:PORT=ALIAS), reconnecting with exponential
backoff and jitter. The hub's host key must be pinned (--hub-key or --known-hosts).
The device name defaults to the key file's base name.

Stock clients work too:  ssh -N -R http:80:127.0.0.1:80 -L 1883:broker:1883 dev1@HUB

Under systemd (Type=notify; dist/systemd/iotsafe-agent.service) the agent is ready once
its sandbox is on and its direct forwards listen, so a device application ordered after
it never runs unconfined; its status line says whether the session is up, and it
answers the watchdog (WatchdogSec=) while it makes progress: an agent that hangs is
restarted.`,
		Example: `  iotsafe agent --hub hub:2222 --key /etc/iotsafe/dev1 --hub-key SHA256:... \
      --expose http=127.0.0.1:80 --forward 127.0.0.1:1883=broker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Read (and cleared) before anything could start a child process.
			notify, notifyErr := service.NotifierFromEnv()
			if file != "" {
				if err := mergeAgentFile(file, &f, cmd); err != nil {
					return err
				}
			}
			cfg, err := f.build(checkConfig)
			if err != nil {
				return err
			}
			if checkConfig {
				printAgentConfig(cmd, f, cfg)
				return nil
			}
			f.Log.Journal = service.OnJournal(cmd.ErrOrStderr())
			log, _ := logging.New(f.Log, cmd.ErrOrStderr())
			if notifyErr != nil {
				log.Warn("the service manager's notification settings are unusable; running without them", "err", notifyErr)
			}
			cfg.Logger = log
			superviseAgent(&cfg, notify)
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			alive := func() (string, error) {
				err := a.Alive()
				if err != nil {
					log.Error("no progress: the service manager's watchdog will restart the agent", "err", err)
				}
				return "", err
			}
			go notify.Keep(ctx, 0, alive, service.ManagerUnreachable(log))
			err = a.Run(ctx)
			notify.Stopping("")
			return service.IgnoreCanceled(err)
		},
	}
	c.AddCommand(joinCmd())
	fl := c.Flags()
	fl.BoolVar(&checkConfig, "check-config", false, "check the settings (key readable, hub key pinned, forwards well formed), print what the agent would do and exit without connecting: 1 if it would refuse to start")
	fl.StringVar(&file, "agent-config", "", "agent config FILE (YAML with the same keys as the flags); flags override it")
	fl.StringVar(&f.Hub, "hub", "", "hub address HOST:PORT; several, comma-separated, for hubs sharing a registry: tried in turn when a session fails")
	fl.StringVar(&f.Device, "device", "", "device name (default: base name of --key)")
	fl.StringVar(&f.Key, "key", "", "device private key FILE (OpenSSH format); re-read before a reconnect when it changed (key rotation)")
	fl.StringVar(&f.HubKey, "hub-key", "", "pin the hub's host key by fingerprint SHA256:... (several hubs: their fingerprints, comma-separated)")
	fl.StringVar(&f.KnownHosts, "known-hosts", "", "trust hub keys listed in this known_hosts FILE")
	fl.StringVar(&f.HubCA, "hub-ca", "", "trust any hub with a host certificate of this CA for the address dialled: the CA's public key, or a FILE of them (OpenSSH's @cert-authority; 'iotsafe ca init' on the hub)")
	fl.StringVar(&f.Certificate, "certificate", "", "an OpenSSH certificate FILE of the device key ('iotsafe ca sign' on the hub, or a manufacturer's); default: KEY-cert.pub if it exists")
	fl.BoolVar(&f.TrustOnFirstUse, "trust-on-first-use", false, "with --known-hosts: record the hub's key on first connect (a changed key is still refused)")
	fl.StringArrayVar(&f.Expose, "expose", nil, "expose a device service: ALIAS=HOST:PORT (repeatable)")
	fl.StringArrayVar(&f.Forward, "forward", nil, "reach a hub service: HOST:PORT=ALIAS (repeatable)")
	fl.DurationVar(&f.KeepaliveInterval, "keepalive", 15*time.Second, "keepalive interval; the session is dropped after 3 missed answers")
	fl.BoolVar(&f.Coalesce, "coalesce", false, "let TCP merge small SSH packets (Nagle), as OpenSSH does without a terminal: fewer frames on slow radio links (802.15.4), up to a round trip more latency")
	fl.BoolVar(&f.Compress, "compress", false, "ask the hub to compress forwarded connections with one context for the whole session (the device's profile must allow it; see docs/security-model.md on compression side channels)")
	fl.BoolVar(&multiplex, "multiplex", true, "carry forwarded connections in one channel: no round trip to open one, no close messages, about half the hub's CPU per connection; --multiplex=false opens one SSH channel per connection, as stock clients do")
	fl.IntVar(&f.SandboxUID, "sandbox-uid", -1, "confine the device application running as this uid to loopback while the agent runs (nftables, needs root)")
	fl.StringVar(&f.Log.Level, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.Log.Format, "log-format", "text", "text or json")
	return c
}

// printAgentConfig is 'iotsafe agent --check-config': what the agent would do, and the
// device key's fingerprint to compare with 'iotsafe device show' on the hub.
func printAgentConfig(cmd *cobra.Command, f agentFile, cfg agent.Config) {
	w := cmd.OutOrStdout()
	fmt.Fprintln(w, "agent configuration ok")
	fmt.Fprintf(w, "  device   %s, key %s (%s %s)\n", cfg.Device, cfg.KeyFile, cfg.Signer.PublicKey().Type(), ssh.FingerprintSHA256(cfg.Signer.PublicKey()))
	trust := "pinned " + f.HubKey
	if f.HubCA != "" {
		trust = "hubs certified by the CA " + f.HubCA
	}
	if f.KnownHosts != "" {
		trust = "known_hosts " + f.KnownHosts
		switch {
		case f.TrustOnFirstUse && !exists(f.KnownHosts):
			trust += " (trust on first use: created at the first connection)"
		case f.TrustOnFirstUse:
			trust += " (trust on first use)"
		}
	}
	fmt.Fprintf(w, "  hub      %s, host key %s\n", cfg.Hub, trust)
	if cfg.Certificate != "" {
		fmt.Fprintf(w, "  cert     %s (offered before the key)\n", cfg.Certificate)
	}
	for _, e := range cfg.Expose {
		fmt.Fprintf(w, "  expose   %s=%s\n", e.Alias, e.Target)
	}
	for _, fw := range cfg.Forward {
		fmt.Fprintf(w, "  forward  %s=%s\n", fw.Listen, fw.Alias)
	}
	if cfg.Sandbox != nil {
		fmt.Fprintf(w, "  sandbox  %s\n", cfg.Sandbox)
	}
	if fi, err := os.Stat(cfg.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(w, "warning: the key %s is readable by group or others (%s): whoever reads it can pose as the device (chmod 600)\n", cfg.KeyFile, fi.Mode().Perm())
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// superviseAgent has the agent tell the service manager its state: ready once it
// listens (before the first connection: a hub that is down must not fail the device's
// boot), then whether the session is up. Nothing without a manager.
func superviseAgent(cfg *agent.Config, notify *sdnotify.Notifier) {
	if !notify.Enabled() {
		return
	}
	var what []string
	for _, e := range cfg.Expose {
		what = append(what, "exposing "+e.Alias)
	}
	for _, fw := range cfg.Forward {
		what = append(what, "forwarding "+fw.Listen+" to "+fw.Alias)
	}
	services := strings.Join(what, ", ")
	cfg.OnStarted = func() { notify.Ready("connecting to " + cfg.Hub) }
	cfg.OnReady = func(hub string) { notify.Status("session up with " + hub + ": " + services) }
	cfg.OnRetry = func(err error, delay time.Duration) {
		notify.Status(fmt.Sprintf("no session (%v); next attempt in %s", err, delay.Round(100*time.Millisecond)))
	}
}

// CheckFile reports whether b is an agent.yaml the agent would take: only keys it
// knows, forwards and the hub key pin well formed. It reads no other file and connects
// to nothing ('iotsafe device agent-config' checks what it writes with it).
func CheckFile(b []byte) error {
	var f agentFile
	if err := strictyaml.Decode(b, &f); err != nil {
		return err
	}
	for _, s := range f.Expose {
		if _, err := agent.ParseExpose(s); err != nil {
			return err
		}
	}
	for _, s := range f.Forward {
		if _, err := agent.ParseForward(s); err != nil {
			return err
		}
	}
	if f.HubKey != "" {
		if _, err := agent.PinFingerprint(f.HubKey); err != nil {
			return err
		}
	}
	return f.Log.Validate()
}

// mergeAgentFile fills from the file every field whose flag was not given.
func mergeAgentFile(path string, f *agentFile, cmd *cobra.Command) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var fileCfg agentFile
	if err := strictyaml.Decode(b, &fileCfg); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	set := func(flag string, dst *string, v string) {
		if !cmd.Flags().Changed(flag) && v != "" {
			*dst = v
		}
	}
	set("hub", &f.Hub, fileCfg.Hub)
	set("device", &f.Device, fileCfg.Device)
	set("key", &f.Key, fileCfg.Key)
	set("hub-key", &f.HubKey, fileCfg.HubKey)
	set("known-hosts", &f.KnownHosts, fileCfg.KnownHosts)
	set("hub-ca", &f.HubCA, fileCfg.HubCA)
	set("certificate", &f.Certificate, fileCfg.Certificate)
	set("log-level", &f.Log.Level, fileCfg.Log.Level)
	set("log-format", &f.Log.Format, fileCfg.Log.Format)
	if !cmd.Flags().Changed("trust-on-first-use") {
		f.TrustOnFirstUse = fileCfg.TrustOnFirstUse
	}
	if !cmd.Flags().Changed("expose") {
		f.Expose = fileCfg.Expose
	}
	if !cmd.Flags().Changed("forward") {
		f.Forward = fileCfg.Forward
	}
	if !cmd.Flags().Changed("sandbox-uid") && fileCfg.SandboxUID != 0 {
		f.SandboxUID = fileCfg.SandboxUID
	}
	if !cmd.Flags().Changed("coalesce") && fileCfg.Coalesce {
		f.Coalesce = true
	}
	if !cmd.Flags().Changed("compress") && fileCfg.Compress {
		f.Compress = true
	}
	if !cmd.Flags().Changed("multiplex") && fileCfg.Multiplex != nil {
		*f.Multiplex = *fileCfg.Multiplex
	}
	if !cmd.Flags().Changed("keepalive") && fileCfg.KeepaliveInterval != 0 {
		f.KeepaliveInterval = fileCfg.KeepaliveInterval
	}
	return nil
}

// build makes the agent's configuration; with dryRun (--check-config) it creates
// nothing: a known_hosts file to be created at the first connection is only checked to
// be creatable.
func (f *agentFile) build(dryRun bool) (agent.Config, error) {
	var cfg agent.Config
	if f.Hub == "" {
		return cfg, errors.New("--hub HOST:PORT is required")
	}
	if f.Key == "" {
		return cfg, errors.New("--key FILE is required")
	}
	cfg.Hub, cfg.Device, cfg.KeepaliveInterval = f.Hub, f.Device, f.KeepaliveInterval
	cfg.Coalesce, cfg.Compress = f.Coalesce, f.Compress
	cfg.ChannelPerConnection = f.Multiplex != nil && !*f.Multiplex
	if cfg.Device == "" {
		cfg.Device = strings.TrimSuffix(filepath.Base(f.Key), filepath.Ext(f.Key))
	}
	b, err := os.ReadFile(f.Key)
	if err != nil {
		return cfg, fmt.Errorf("--key: %w", err)
	}
	if cfg.Signer, err = ssh.ParsePrivateKey(b); err != nil {
		return cfg, fmt.Errorf("--key %s: %w", f.Key, err)
	}
	cfg.KeyFile = f.Key
	cfg.Certificate = f.Certificate
	if cfg.Certificate == "" && exists(f.Key+"-cert.pub") {
		cfg.Certificate = f.Key + "-cert.pub" // where ssh-keygen -s and 'iotsafe ca sign' put it
	}
	if cfg.Certificate != "" {
		if _, err := agent.CertSigner(cfg.Certificate, cfg.Signer); err != nil {
			return cfg, fmt.Errorf("--certificate %s: %w", cfg.Certificate, err)
		}
	}
	switch {
	case (f.HubKey != "") && (f.KnownHosts != "") || (f.HubCA != "") && (f.HubKey != "" || f.KnownHosts != ""):
		return cfg, errors.New("give one of --hub-key, --known-hosts or --hub-ca")
	case f.HubCA != "":
		var ca *agent.HostCA
		if ca, err = agent.TrustHostCA(f.HubCA); err == nil {
			cfg.HostKey, cfg.HostKeys, cfg.HostKeyAlgorithms = ca.Check, ca, agent.CertHostKeyAlgorithms
		}
	case f.HubKey != "":
		var p *agent.Pins
		if p, err = agent.PinFingerprint(f.HubKey); err == nil {
			cfg.HostKey, cfg.HostKeys = p.Check, p
		}
	case f.KnownHosts != "" && dryRun && f.TrustOnFirstUse && !exists(f.KnownHosts):
		if err = unix.Access(filepath.Dir(f.KnownHosts), unix.W_OK); err != nil {
			err = fmt.Errorf("--known-hosts %s: cannot be created: %w", f.KnownHosts, err)
		}
	case f.KnownHosts != "":
		var k *agent.KnownHostsFile
		if k, err = agent.KnownHosts(f.KnownHosts, f.TrustOnFirstUse); err == nil {
			cfg.HostKey, cfg.HostKeys = k.Check, k
		}
	default:
		return cfg, errors.New("the hub's host key must be pinned: --hub-key SHA256:... (printed by 'iotsafe hub'), --known-hosts FILE [--trust-on-first-use], or --hub-ca KEY (the hub's host certificate authority)")
	}
	if err != nil {
		return cfg, err
	}
	if f.SandboxUID >= 0 {
		if f.SandboxUID == 0 {
			return cfg, errors.New("--sandbox-uid 0 would cut root off the network: give the application's own uid")
		}
		k, err := firewall.NewKernel(firewall.SandboxTable)
		if err != nil {
			return cfg, fmt.Errorf("--sandbox-uid: %w (the sandbox needs root or CAP_NET_ADMIN)", err)
		}
		cfg.Sandbox = uidSandbox{k: k, uid: uint32(f.SandboxUID)}
	}
	for _, s := range f.Expose {
		e, err := agent.ParseExpose(s)
		if err != nil {
			return cfg, err
		}
		cfg.Expose = append(cfg.Expose, e)
	}
	for _, s := range f.Forward {
		fw, err := agent.ParseForward(s)
		if err != nil {
			return cfg, err
		}
		cfg.Forward = append(cfg.Forward, fw)
	}
	return cfg, nil
}
