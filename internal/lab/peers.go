package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// SSHServer is one SSH server under test with what the fleet needs to use it.
type SSHServer struct {
	Name    string
	Proc    *Proc
	Addr    string
	HostKey ssh.PublicKey
	IoTsafe bool
	// ChannelPerConnection: the fleet of an iotsafe hub opens one SSH channel per
	// connection instead of multiplexing them in one, as agents do by default.
	ChannelPerConnection bool
	User                 string
	KeyDir               string
	Front                *FrontdoorInfo // iotsafe with IoTsafeOpts.Frontdoor only
	REST                 string         // iotsafe: the plain REST listener, if configured
	MetricsURL           string         // iotsafe: http://ADDR/metrics, if configured
	MQTTTLS              string         // iotsafe: the broker's TLS listener, if configured
	MQTT                 string         // iotsafe: the broker's plain listener, if configured
	dataDir              string
	bin                  string // the iotsafe binary, for admin commands on dataDir
	netns                *Netns
	prefix               string // of its devices' names (IoTsafeOpts.Prefix)
}

// Status asks an iotsafe hub for its state over its admin socket.
func (s *SSHServer) Status() (*admin.HubInfo, error) {
	rep, err := admin.Call(filepath.Join(s.dataDir, admin.SocketName), admin.Request{Op: admin.OpInfo})
	if err != nil {
		return nil, err
	}
	return rep.Hub, nil
}

// DataDir is an iotsafe hub's data folder (for admin commands).
func (s *SSHServer) DataDir() string { return s.dataDir }

// NetnsDial dials from the hub's network namespace (the host's if it has none): where
// its protected sockets are.
func (s *SSHServer) NetnsDial() func(ctx context.Context, addr string) (net.Conn, error) {
	if s.netns != nil {
		return s.netns.Dial
	}
	var d net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// EventCount counts an iotsafe hub's audit events of kind, up to atMost.
func (s *SSHServer) EventCount(ctx context.Context, kind string, atMost int) (int, error) {
	return s.admin().EventCount(ctx, kind, atMost)
}

// OnlineDevices asks an iotsafe hub which devices have a live session there.
func (s *SSHServer) OnlineDevices() (map[string]bool, error) {
	rep, err := admin.Call(filepath.Join(s.dataDir, admin.SocketName), admin.Request{Op: admin.OpStatus})
	if err != nil {
		return nil, err
	}
	return rep.Online, nil
}

// Bench knows where the iotsafe binary is and where to put scratch files.
type Bench struct {
	Bin  string // the iotsafe binary (for hub, fleet and helper servers)
	Dir  string // scratch folder of this run
	Size int    // response body size
	// ProfileDir, if set, makes every hub under test, fleet and application write a CPU
	// profile there (NAME.pprof).
	ProfileDir string
	runs       int // peers started so far: each gets its own folder (and pool)
}

// Scratch returns a fresh folder for one peer start.
func (b *Bench) Scratch(name string) (string, error) {
	b.runs++
	d := filepath.Join(b.Dir, fmt.Sprintf("%s-%d", name, b.runs))
	return d, os.MkdirAll(d, 0o700)
}

// NewKey writes a fresh ed25519 private key to path (0600) and returns its public key.
func NewKey(path, comment string) (ssh.PublicKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	os.Remove(path)
	if err := hostkey.WritePrivateKey(path, k, comment); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(k.Public())
}

// IoTsafeOpts selects how a lab hub runs.
type IoTsafeOpts struct {
	Sessions, Forwards int
	UserSpace          bool   // the per-connection owner check
	Kernel             bool   // the nftables layer: only inside Netns, never on the host
	Netns              *Netns // run the hub there (nil: the host's namespace)
	GrantUID           uint32 // if set, this uid may reach every lab device
	Frontdoor          bool   // also serve the front door, with an account granted every device
	FrontdoorConns     int    // the front door's max_conns; 0 keeps the hub's default
	// MaxChannels is the lab profile's limit of concurrent connections per device
	// session; 0 means 4 per forward plus 64. The rps part raises it above the load
	// generator's concurrency: there one device serves every client.
	MaxChannels int
	// Direct are the lab profile's direct aliases (alias -> target).
	Direct map[string]string
	// Compression lets the lab's devices compress their multiplexed channel.
	Compression bool
	// Configure, if set, changes the hub's configuration further (rest, jwt, mqtt, ...)
	// before it is written as hub.yaml.
	Configure func(*hub.Config)
	// SSHListen is where the hub listens for devices; "" means a free loopback port.
	// A bench that restarts a hub on the same address sets it.
	SSHListen string
	// Secrets, if set, gives every device a telemetry secret at enrolment and is handed
	// each (for clients that log in as devices).
	Secrets func(device, secret string)
	// Enroll, if set, enrolls more with the CLI once the devices are (gateways, ...).
	Enroll func(ctx context.Context, adm Admin) error
	// Prefix of the device names; "" means dev (dev0, dev1, ...).
	Prefix string
	// Pool, if its CIDR is set, is the hub's pool instead of a /16 of its own.
	Pool sockets.Config
	// Registry, if set, is a postgres:// DSN of an empty database to keep the hub's
	// registry in instead of its data folder; HubName and PeerAddress name the hub
	// among those sharing it (registry.hub_name, registry.peer_address).
	Registry             string
	HubName, PeerAddress string
}

// LabHub is an enrolled lab hub's data folder; a bench may start it several times
// with different configurations (StartEnrolled).
type LabHub struct {
	Name, Dir, Keys string
	pool            sockets.Config
	frontToken      string
}

// StartIoTsafe enrolls o.Sessions devices with o.Forwards aliases each and starts a hub.
func (b *Bench) StartIoTsafe(ctx context.Context, name string, o IoTsafeOpts) (*SSHServer, error) {
	lh, err := b.EnrollIoTsafe(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return b.StartEnrolled(ctx, lh, o)
}

// EnrollIoTsafe makes a hub's data folder with o.Sessions devices (dev0, dev1, ...).
func (b *Bench) EnrollIoTsafe(ctx context.Context, name string, o IoTsafeOpts) (*LabHub, error) {
	dir, err := b.Scratch(name)
	if err != nil {
		return nil, err
	}
	keys := filepath.Join(dir, "keys")
	os.MkdirAll(keys, 0o700)
	// Each hub of the run gets its own /16 so two hubs never share a protected address.
	pool := sockets.Config{CIDR: fmt.Sprintf("127.%d.0.0/16", 100+b.runs%100)}
	if o.Pool.CIDR != "" {
		pool = o.Pool
	}
	frontToken, err := enrollLab(ctx, Admin{Bin: b.Bin, Data: dir}, keys, pool, o)
	if err != nil {
		return nil, err
	}
	return &LabHub{Name: name, Dir: dir, Keys: keys, pool: pool, frontToken: frontToken}, nil
}

// StartEnrolled writes the hub.yaml o asks for into an enrolled data folder and starts
// the hub on it.
func (b *Bench) StartEnrolled(ctx context.Context, lh *LabHub, o IoTsafeOpts) (*SSHServer, error) {
	if o.Kernel && o.Netns == nil {
		return nil, fmt.Errorf("lab: the kernel layer runs only in a namespace of the lab's")
	}
	if err := writeLabHubConfig(lh.Dir, lh.pool, o); err != nil {
		return nil, err
	}
	argv := append([]string{b.Bin, "hub", "--announce=false", "--data", lh.Dir, "--ready-file", filepath.Join(lh.Dir, readyFile)}, b.ProfileArgs(lh.Name)...)
	if o.Netns != nil {
		argv = o.Netns.Exec(argv...)
	}
	proc, err := StartProc(lh.Name, nil, argv...)
	if err != nil {
		return nil, err
	}
	srv, err := awaitLabHub(ctx, proc, lh.Dir, o.Frontdoor)
	if err != nil {
		proc.Stop()
		return nil, err
	}
	srv.Name, srv.KeyDir, srv.netns, srv.prefix, srv.bin = lh.Name, lh.Keys, o.Netns, o.Prefix, b.Bin
	if srv.Front != nil {
		srv.Front.Token = lh.frontToken
	}
	return srv, nil
}

// enrollLab enrolls the lab profile and o.Sessions devices (keys in keys) with the CLI,
// and the grants o asks for; it returns the front-door token if any.
func enrollLab(ctx context.Context, adm Admin, keys string, pool sockets.Config, o IoTsafeOpts) (frontToken string, err error) {
	// The configuration first: the CLI finds the registry and its pool through it.
	if err := writeLabHubConfig(adm.Data, pool, o); err != nil {
		return "", err
	}
	if err := adm.Init(ctx); err != nil {
		return "", err
	}
	maxChannels := o.MaxChannels
	if maxChannels == 0 {
		maxChannels = 4*o.Forwards + 64
	}
	prof := &profile.Profile{Name: "lab", Reverse: map[string]int{}, Direct: o.Direct, MaxForwards: o.Forwards, MaxChannels: maxChannels, Compression: o.Compression}
	for i := range o.Forwards {
		prof.Reverse[fmt.Sprintf("f%d", i)] = 0
	}
	if err := AddProfile(ctx, adm, prof); err != nil {
		return "", err
	}
	existing, err := adm.Devices(ctx)
	if err != nil {
		return "", err
	}
	var list strings.Builder
	for i := len(existing); i < o.Sessions; i++ {
		name := DeviceName(o.Prefix, i)
		pub, err := NewKey(filepath.Join(keys, name), name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&list, "%s %s", name, ssh.MarshalAuthorizedKey(pub))
	}
	flags := []string{"--profile", "lab", "--group", "lab"}
	if o.Secrets != nil {
		flags = append(flags, "--secrets")
	}
	enrolled, err := adm.Import(ctx, list.String(), flags...)
	if err != nil {
		return "", err
	}
	if o.Secrets != nil {
		for _, e := range enrolled {
			o.Secrets(e.Name, e.Secret)
		}
	}
	if o.Enroll != nil {
		if err := o.Enroll(ctx, adm); err != nil {
			return "", err
		}
	}
	if o.Frontdoor {
		if frontToken, err = frontdoorAccount(ctx, adm); err != nil {
			return "", err
		}
	}
	if o.GrantUID != 0 {
		if _, err := adm.Run(ctx, nil, "grant", "--user", fmt.Sprint(o.GrantUID), "@lab", "*"); err != nil {
			return "", err
		}
	}
	return frontToken, nil
}

// AddProfile stores p with 'iotsafe profile add'.
func AddProfile(ctx context.Context, adm Admin, p *profile.Profile) error {
	f := filepath.Join(adm.Data, "profile-"+p.Name+".yaml")
	if err := os.WriteFile(f, p.Marshal(), 0o600); err != nil {
		return err
	}
	_, err := adm.Run(ctx, nil, "profile", "add", f)
	return err
}

// writeLabHubConfig writes the hub.yaml of a lab hub: the hub's own config type,
// marshalled, so the lab writes nothing the hub would read differently.
func writeLabHubConfig(dir string, pool sockets.Config, o IoTsafeOpts) error {
	c, err := hub.ParseConfig(nil) // the defaults, written out
	if err != nil {
		return err
	}
	// The lab measures the paths at full speed: a simulated device sends far faster than
	// the per-device budgets a fleet should keep.
	c.Telemetry.LiftDeviceBudgets()
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	c.Log.Level = "error"
	if LogsKept() {
		c.Log.Level = "debug"
	}
	c.SSH.Listen = o.SSHListen
	if c.SSH.Listen == "" {
		c.SSH.Listen = "127.0.0.1:0"
	}
	// forward_memory_mib: the lab measures the hub's memory itself and runs more busy
	// sessions at once than the default budget (half the machine) admits.
	c.SSH.MaxHandshakes, c.SSH.ForwardMemoryMiB = 4096, 1048576
	c.Pool = sockets.Config{CIDR: pool.CIDR, PortBase: max(pool.PortBase, sockets.DefaultPortBase), SharedListeners: pool.SharedListeners}
	c.Access.Kernel, c.Access.UserSpace = onOff(o.Kernel), onOff(o.UserSpace)
	if o.Frontdoor {
		c.Frontdoor.Listen, c.Frontdoor.Domain = "127.0.0.1:0", FrontdoorDomain
		if o.FrontdoorConns > 0 {
			c.Frontdoor.MaxConns = o.FrontdoorConns
		}
	}
	if o.Registry != "" {
		c.Registry = hub.RegistryConfig{DSN: o.Registry, HubName: o.HubName, PeerAddress: o.PeerAddress}
	}
	if o.Configure != nil {
		o.Configure(&c)
	}
	return WriteHubConfig(dir, c)
}

// UnlimitedStore is a notification store's configuration for the lab: defaults, with the
// per-device budgets lifted (the lab measures the store at full speed).
func UnlimitedStore() telemetry.Config {
	var c telemetry.Config
	c.LiftDeviceBudgets()
	return c
}

// WriteHubConfig writes c as DIR/hub.yaml (mode 0600: it may name key files and a DSN).
func WriteHubConfig(dir string, c hub.Config) error {
	b, err := hub.MarshalConfig(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, hub.ConfigName), b, 0o600)
}

// awaitLabHub waits for a started hub's last start line, then reads where it listens,
// its host key and its front door's CA from its ready file.
func awaitLabHub(ctx context.Context, proc *Proc, dir string, withFront bool) (*SSHServer, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := proc.ReadLine(rctx, "hub listening for devices on "); err != nil {
		return nil, err
	}
	ready, err := hub.ReadReadyFile(filepath.Join(dir, readyFile))
	if err != nil {
		return nil, err
	}
	if withFront && ready.Frontdoor == "" {
		return nil, fmt.Errorf("lab: the hub's ready file names no front door")
	}
	if len(ready.HostKeys) == 0 {
		return nil, fmt.Errorf("lab: the hub's ready file names no host key")
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ready.HostKeys[0].PublicKey))
	if err != nil {
		return nil, fmt.Errorf("lab: host key in the ready file: %w", err)
	}
	srv := &SSHServer{Proc: proc, Addr: ready.SSH, HostKey: hostKey, IoTsafe: true, dataDir: dir, REST: ready.REST, MQTTTLS: ready.MQTTTLS, MQTT: ready.MQTT}
	if ready.Metrics != "" {
		srv.MetricsURL = "http://" + ready.Metrics + "/metrics"
	}
	if withFront {
		caPEM, err := os.ReadFile(ready.FrontdoorCA)
		if err != nil {
			return nil, err
		}
		srv.Front = &FrontdoorInfo{Addr: ready.Frontdoor, CA: x509.NewCertPool(), CAFile: ready.FrontdoorCA}
		srv.Front.CA.AppendCertsFromPEM(caPEM)
	}
	return srv, nil
}

// readyFile is the lab hub's --ready-file, in its data folder.
const readyFile = "ready.json"

// FrontdoorDomain is the front door's domain in lab hubs.
const FrontdoorDomain = "lab.test"

// FrontdoorInfo is how the load generator reaches a lab hub's front door.
type FrontdoorInfo struct {
	Addr  string
	Token string         // Bearer token of the lab's account, granted every lab device
	CA    *x509.CertPool // the hub's local CA
	// CAFile is the CA's PEM file, for peers in other processes.
	CAFile string
}

// frontdoorAccount adds the lab's account with a token and a grant on every lab device.
func frontdoorAccount(ctx context.Context, adm Admin) (string, error) {
	if _, err := adm.Run(ctx, nil, "account", "add", "lab", "--no-password"); err != nil {
		return "", err
	}
	tok, err := adm.Run(ctx, nil, "account", "token", "lab", "--label", "bench")
	if err != nil {
		return "", err
	}
	if _, err := adm.Run(ctx, nil, "grant", "--account", "lab", "@lab", "*"); err != nil {
		return "", err
	}
	return strings.TrimSpace(string(tok)), nil
}

// SocketsByDevice maps every device of an iotsafe hub's registry to its protected
// sockets' addresses.
func (s *SSHServer) SocketsByDevice(ctx context.Context) (map[string][]string, error) {
	devs, err := s.admin().Devices(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, d := range devs {
		for _, so := range d.Sockets {
			out[d.Name] = append(out[d.Name], so.Address)
		}
	}
	return out, nil
}

// Sockets lists the protected sockets of the first n devices (iotsafe only).
func (s *SSHServer) Sockets(ctx context.Context, n int) ([]string, error) {
	byName, err := s.SocketsByDevice(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range n {
		name := DeviceName(s.prefix, i)
		socks, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("lab: device %s is not enrolled", name)
		}
		out = append(out, socks...)
	}
	return out, nil
}

// admin runs the CLI on the hub's data folder.
func (s *SSHServer) admin() Admin { return Admin{Bin: s.bin, Data: s.dataDir} }

func clientKey(dir string) (ssh.PublicKey, string, error) {
	keys := filepath.Join(dir, "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		return nil, "", err
	}
	pub, err := NewKey(filepath.Join(keys, "client"), "lab")
	return pub, keys, err
}

// StartOpenSSH runs the system's sshd binary (not its service) on a free loopback port
// with generated keys and configuration. It needs root, as sshd does.
func (b *Bench) StartOpenSSH(ctx context.Context) (*SSHServer, error) {
	if os.Getuid() != 0 {
		return nil, fmt.Errorf("openssh: sshd needs root")
	}
	dir, err := b.Scratch("openssh")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfgFile, keys, hostPub, err := PrepareSSHD(dir, fmt.Sprintf("127.0.0.1:%d", port), "")
	if err != nil {
		return nil, err
	}
	proc, err := StartProc("openssh", nil, "/usr/sbin/sshd", "-D", "-e", "-f", cfgFile)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := WaitTCP(ctx, proc, addr); err != nil {
		proc.Stop()
		return nil, err
	}
	return &SSHServer{Name: "openssh", Proc: proc, Addr: addr, HostKey: hostPub, User: "root", KeyDir: keys}, nil
}

// PrepareSSHD writes what the lab's sshd needs into dir: a client key pair (in KEYS, for
// the fleet or ssh), its authorized_keys, a host key, and sshd_config listening on listen
// with extra lines appended.
func PrepareSSHD(dir, listen, extra string) (cfgFile, keys string, hostPub ssh.PublicKey, err error) {
	pub, keys, err := clientKey(dir)
	if err != nil {
		return "", "", nil, err
	}
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, ssh.MarshalAuthorizedKey(pub), 0o600); err != nil {
		return "", "", nil, err
	}
	if hostPub, err = NewKey(filepath.Join(dir, "host_key"), "lab-host"); err != nil {
		return "", "", nil, err
	}
	cfgFile = filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgFile, []byte(sshdConfig(listen, dir, ak)+extra), 0o600); err != nil {
		return "", "", nil, err
	}
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	return cfgFile, keys, hostPub, nil
}

// sshdConfig is the lab's sshd configuration: keys in dir, only public-key logins,
// forwarding on, nothing else.
func sshdConfig(listen, dir, authorizedKeys string) string {
	return fmt.Sprintf(`ListenAddress %s
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
GatewayPorts no
X11Forwarding no
PrintMotd no
UseDNS no
MaxStartups 4096
MaxAuthTries 3
LogLevel ERROR
`, listen, filepath.Join(dir, "host_key"), filepath.Join(dir, "sshd.pid"), authorizedKeys)
}

// StartDropbear runs dropbear on a free loopback port. Dropbear reads authorized keys only
// from the user's home, so it runs in a private mount namespace where a scratch folder is
// mounted over /root: the host's /root is never touched.
func (b *Bench) StartDropbear(ctx context.Context) (*SSHServer, error) {
	if os.Getuid() != 0 {
		return nil, fmt.Errorf("dropbear: needs root (to log in as root and for the mount namespace)")
	}
	dir, err := b.Scratch("dropbear")
	if err != nil {
		return nil, err
	}
	pub, keys, err := clientKey(dir)
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "authorized_keys"), ssh.MarshalAuthorizedKey(pub), 0o600)
	hostKey := filepath.Join(dir, "host_key")
	if out, err := exec.Command("dropbearkey", "-t", "ed25519", "-f", hostKey).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dropbearkey: %v %s", err, out)
	}
	out, err := exec.Command("dropbearkey", "-y", "-f", hostKey).Output()
	if err != nil {
		return nil, err
	}
	var hostPub ssh.PublicKey
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "ssh-") {
			hostPub, _, _, _, err = ssh.ParseAuthorizedKey([]byte(line))
			if err != nil {
				return nil, err
			}
		}
	}
	if hostPub == nil {
		return nil, fmt.Errorf("dropbear: no public host key in %q", out)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	script := fmt.Sprintf(`mount --bind %s /root && exec dropbear -F -E -s -p 127.0.0.1:%d -r %s -P %s`, home, port, hostKey, filepath.Join(dir, "dropbear.pid"))
	proc, err := StartProc("dropbear", nil, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := WaitTCP(ctx, proc, addr); err != nil {
		proc.Stop()
		return nil, err
	}
	return &SSHServer{Name: "dropbear", Proc: proc, Addr: addr, HostKey: hostPub, User: "root", KeyDir: keys}, nil
}

// SetProfileDir makes every hub under test write a CPU profile into dir (created);
// "" leaves profiling off.
func (b *Bench) SetProfileDir(dir string) error {
	if dir == "" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	b.ProfileDir = abs
	return os.MkdirAll(abs, 0o755)
}

// ProfileArgs asks a lab process to profile itself as NAME when profiling is on.
func (b *Bench) ProfileArgs(name string) []string {
	if b.ProfileDir == "" {
		return nil
	}
	return []string{"--cpuprofile", filepath.Join(b.ProfileDir, name+".pprof")}
}

// StartFleet connects sessions x forwards to the server and returns the addresses the
// load generator should use.
func (b *Bench) StartFleet(ctx context.Context, s *SSHServer, target string, sessions, forwards int) (*Proc, []string, error) {
	hk := filepath.Join(s.KeyDir, "server.pub")
	if err := os.WriteFile(hk, ssh.MarshalAuthorizedKey(s.HostKey), 0o600); err != nil {
		return nil, nil, err
	}
	parallel := "32"
	if s.Name == "dropbear" {
		parallel = "4" // dropbear allows 5 unauthenticated connections per source address
	}
	args := []string{b.Bin, "bench", "fleet", "--server", s.Addr, "--host-key", hk, "--target", target, "--sessions", fmt.Sprint(sessions),
		"--forwards", fmt.Sprint(forwards), "--key-dir", s.KeyDir, "--parallel", parallel}
	args = append(args, b.ProfileArgs(s.Name+"-fleet")...)
	if s.IoTsafe {
		args = append(args, "--iotsafe")
		if s.prefix != "" {
			args = append(args, "--prefix", s.prefix)
		}
		if !s.ChannelPerConnection {
			args = append(args, "--multiplex")
		}
	} else {
		args = append(args, "--user", s.User)
	}
	if s.netns != nil {
		args = s.netns.Exec(args...)
	}
	p, err := StartProc(s.Name+"-fleet", nil, args...)
	if err != nil {
		return nil, nil, err
	}
	// A fleet that is not up by then is stuck, not slow: fail the step, not the run.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(sessions*forwards)*20*time.Millisecond)
	defer cancel()
	var addrs []string
	for {
		line, err := p.ReadLine(rctx, "")
		if err != nil {
			p.Stop()
			return nil, nil, err
		}
		if a, ok := strings.CutPrefix(line, "forward "); ok {
			addrs = append(addrs, a)
		}
		if line == "ready" {
			break
		}
	}
	if s.IoTsafe {
		if addrs, err = s.Sockets(ctx, sessions); err != nil {
			p.Stop()
			return nil, nil, err
		}
	}
	return p, addrs, nil
}

// StartCaddy runs Caddy as the paper's HTTPS server, with the lab's certificate.
func (b *Bench) StartCaddy(ctx context.Context, certFile, keyFile string) (*Proc, string, error) {
	dir, err := b.Scratch("caddy")
	if err != nil {
		return nil, "", err
	}
	port, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system %s
	log {
		level ERROR
	}
}
:%d {
	tls %s %s
	respond "%s" 200
}
`, filepath.Join(dir, "data"), port, certFile, keyFile, strings.Repeat("x", b.Size))
	cf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cf, []byte(caddyfile), 0o600); err != nil {
		return nil, "", err
	}
	p, err := StartProc("caddy", []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}, "caddy", "run", "--config", cf, "--adapter", "caddyfile")
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := WaitTCP(ctx, p, addr); err != nil {
		p.Stop()
		return nil, "", err
	}
	return p, addr, nil
}
