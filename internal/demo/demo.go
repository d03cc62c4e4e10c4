package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/hubfind"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// Options of the demo.
type Options struct {
	DataDir string
	Config  hub.Config
	Devices int           // how many simulated devices; 0 means 3
	Binary  string        // how to call iotsafe in the printed hints
	Version string        // of the binary, which iotsafe status shows
	Out     io.Writer     // progress and hints
	Logger  *slog.Logger  // hub and agent logs
	Ready   chan<- string // receives the first device's protected socket once all are up (tests)
}

// Run starts the hub and the devices, prints what to try, and waits for ctx to end.
func Run(ctx context.Context, o Options) error {
	if o.Devices == 0 {
		o.Devices = 3
	}
	if o.Binary == "" {
		o.Binary = "iotsafe"
	}
	fmt.Fprintf(o.Out, "starting hub (data folder %s)\n", o.DataDir)
	h, err := hub.Start(ctx, o.Config, hub.Options{DataDir: o.DataDir, Logger: o.Logger, Version: o.Version})
	if err != nil {
		return err
	}
	defer h.Close()
	hostKey := h.HostKeys()[0]
	fmt.Fprintf(o.Out, "hub: devices connect to %s, host key %s\n", h.SSHAddr(), ssh.FingerprintSHA256(hostKey))
	// The devices trust the hub through a known_hosts file, as a fleet that follows the
	// hub's host key rotations does ('iotsafe hostkey add': they learn the next key).
	trust, err := demoKnownHosts(filepath.Join(o.DataDir, "demo-keys"), h.SSHAddr().String(), h.HostKeys())
	if err != nil {
		return err
	}

	// With the broker's plain listener on, the last device's MQTT goes over its SSH
	// session: a profile with a direct alias to the broker, a local forward in its agent.
	var via mqttVia
	if a := h.Listener("mqtt"); a != nil && o.Devices >= 2 {
		if err := putMQTTProfile(ctx, h.Registry(), a.String()); err != nil {
			return err
		}
		fwd, err := freeLoopback()
		if err != nil {
			return err
		}
		via = mqttVia{tlsDevice: "dev2", sshDevice: fmt.Sprintf("dev%d", o.Devices), forward: fwd}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	ready := make(chan struct{}, o.Devices)
	var first string
	for i := 1; i <= o.Devices; i++ {
		d, err := startDevice(ctx, h, o, fmt.Sprintf("dev%d", i), via, trust, ready, &wg)
		if err != nil {
			return err
		}
		defer d.app.Close()
		if i == 1 {
			first = d.sock
		}
	}
	if err := waitReady(ctx, ready, o.Devices); err != nil || ctx.Err() != nil {
		return err
	}
	body, err := fetch(ctx, first)
	if err != nil {
		return fmt.Errorf("demo: request through dev1 failed: %w", err)
	}
	fmt.Fprintf(o.Out, "\nGET / through dev1's SSH session -> %s\n", body)
	printTryNext(o, h)
	if fa := h.FrontdoorAddr(); fa != nil {
		if err := frontdoorDemo(ctx, h, o, fa.String(), via); err != nil {
			return err
		}
	}
	printLast(o)
	fmt.Fprintln(o.Out, "Press Ctrl-C to stop everything.")
	if o.Ready != nil {
		o.Ready <- first
	}
	<-ctx.Done()
	fmt.Fprintln(o.Out, "stopping")
	return nil
}

// demoDevice is one simulated device: its sensor app and its protected socket.
type demoDevice struct {
	sock string
	app  *http.Server
}

// startDevice enrolls name, starts its sensor app and its agent (which says on ready
// when its session is up); the last device's MQTT goes over its session (via).
func startDevice(ctx context.Context, h *hub.Hub, o Options, name string, via mqttVia, trust *agent.KnownHostsFile, ready chan<- struct{}, wg *sync.WaitGroup) (demoDevice, error) {
	prof, forwards := profile.DefaultName, []agent.Forward(nil)
	if name == via.sshDevice {
		prof, forwards = MQTTProfile, []agent.Forward{{Listen: via.forward, Alias: "broker"}}
	}
	d, signer, err := enroll(ctx, h, filepath.Join(o.DataDir, "demo-keys"), name, prof)
	if err != nil {
		return demoDevice{}, err
	}
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return demoDevice{}, err
	}
	app := &http.Server{Handler: SensorApp(name), ReadHeaderTimeout: 5 * time.Second}
	go app.Serve(appLn)
	var once sync.Once
	a, err := agent.New(agent.Config{
		Hub: h.SSHAddr().String(), Device: name, Signer: signer,
		HostKey:    trust.Check,
		HostKeys:   trust,
		Expose:     []agent.Expose{{Alias: "http", Target: appLn.Addr().String()}},
		Forward:    forwards,
		Logger:     o.Logger.With("component", "agent"),
		BackoffMin: 200 * time.Millisecond,
		OnReady:    func(string) { once.Do(func() { ready <- struct{}{} }) },
	})
	if err != nil {
		app.Close()
		return demoDevice{}, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.Run(ctx)
	}()
	sock := d.Sockets[0].Addr.String()
	fmt.Fprintf(o.Out, "device %s: sensor app on %s, agent connected, service http on protected socket %s\n", name, appLn.Addr(), sock)
	if forwards != nil {
		fmt.Fprintf(o.Out, "device %s: MQTT broker of the hub reached over its SSH session at %s (profile %s)\n", name, via.forward, MQTTProfile)
	}
	return demoDevice{sock: sock, app: app}, nil
}

// waitReady waits for n devices' sessions; nil also when ctx ends first (a Ctrl-C).
func waitReady(ctx context.Context, ready <-chan struct{}, n int) error {
	for range n {
		select {
		case <-ready:
		case <-ctx.Done():
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("demo: devices did not come up within 30s; see the log above")
		}
	}
	return nil
}

// printTryNext prints what to try in another terminal.
func printTryNext(o Options, h *hub.Hub) {
	fmt.Fprintf(o.Out, `All set. In another terminal, try:
  printf 'GET / HTTP/1.0\r\n\r\n' | %[1]s
  %[2]s
  %[11]s   # what these hints depend on (names, certificates, limits), and what to fix
  %[3]s
  %[4]s
  %[5]s
  %[6]s            # the hub's SSH, HTTPS and MQTT/TLS endpoints rated
  %[7]s   # a copy of the data folder, the hub running
  %[8]s && %[9]s   # the devices learn the hub's next host key
  %[10]s   # agent.yaml for a real device ('make agents' builds its agent)
  %[12]s   # a join token: devices enrol keys they make (it prints the command for them)
`, o.cli("connect dev2 http"), o.cli("status"), o.cli("device list"), o.cli("device show dev1"), o.cli("events"), o.cli("scan --hub"),
		o.cli("backup iotsafe-backup-$(date +%s)"), o.cli("hostkey add"), o.cli("hostkey list"),
		o.cli(fmt.Sprintf("device agent-config dev2 --hub %s --expose http=127.0.0.1:80", h.SSHAddr())), o.cli("doctor"),
		o.cli("token create --names 'sensor-*' --uses 10"))
}

// cli is an iotsafe command line as the hints print it: --data only where the commands
// would not find the demo's folder by themselves ('iotsafe help data').
func (o Options) cli(args string) string {
	s := o.Binary + " " + args
	if filepath.Clean(o.DataDir) != filepath.Clean(hubfind.Default) {
		s += " --data " + o.DataDir
	}
	return s
}

// printLast prints what ends the tour: a revoke, undone.
func printLast(o Options) {
	fmt.Fprintf(o.Out, `
Last, stop a device and let it back in:
  %s     # dev%d's session closes at once
  %s  # its keys work again
`, o.cli(fmt.Sprintf("device revoke dev%d", o.Devices)), o.Devices, o.cli(fmt.Sprintf("device reinstate dev%d", o.Devices)))
}

// enroll makes sure the demo device exists with a key we hold and the given profile.
func enroll(ctx context.Context, h *hub.Hub, keyDir, name, prof string) (*registry.Device, ssh.Signer, error) {
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return nil, nil, err
	}
	signer, err := hostkey.LoadOrCreateKey(filepath.Join(keyDir, name))
	if err != nil {
		return nil, nil, err
	}
	d, err := h.Registry().Device(ctx, name)
	if err == nil {
		for _, k := range d.Keys {
			if k.Fingerprint == ssh.FingerprintSHA256(signer.PublicKey()) && !d.Revoked() && d.Profile == prof {
				return d, signer, nil
			}
		}
		// Stale demo device (revoked, another key or profile): enroll it afresh.
		if err := apply(ctx, h, control.RemoveDevice{Device: name}); err != nil {
			return nil, nil, err
		}
	} else if !errors.Is(err, registry.ErrNotFound) {
		return nil, nil, err
	}
	out, err := h.Control().Apply(ctx, control.AddDevice{Name: name, Profile: prof, Key: string(ssh.MarshalAuthorizedKey(signer.PublicKey()))})
	return out.Device, signer, err
}

// apply takes the demo's changes through the hub's change path, as the CLI's would.
func apply(ctx context.Context, h *hub.Hub, changes ...control.Change) error {
	for _, ch := range changes {
		if _, err := h.Control().Apply(ctx, ch); err != nil {
			return err
		}
	}
	return nil
}

// freeLoopback is a loopback address that was free a moment ago.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func fetch(ctx context.Context, addr string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return string(b), err
}

// demoKnownHosts writes the demo devices' known_hosts file, holding the hub's keys as
// they are at this start (0600, replaced every run).
func demoKnownHosts(dir, addr string, keys []ssh.PublicKey) (*agent.KnownHostsFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, k) + "\n")
	}
	path := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	return agent.KnownHosts(path, false)
}
