package devicebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/childproc"
	hubpkg "github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// Device-bench schemes (paper 000 section VI): how the device's HTTP GETs reach the
// gateway's file server.
var Schemes = []string{"plain", "https12", "https13", "iotsafe", "iotsafe_c", "openssh", "openssh_c"}

// PaperSizes are the file sizes of paper 000 figs. 11-14 (4 B to 262 KB).
var PaperSizes = []int{4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144}

// Energy model of the device (docs/bench.md): the radio's is lab.RadioJoules; cpuWatts
// is the power of one busy core of a Raspberry Pi 3 class device above idle (an
// assumption of this lab; the paper turns CPU time into energy proportionally, and
// reports energy relative to plain HTTP, so the constant cancels in its figures).
const cpuWatts = 0.35

// Options configures 'iotsafe bench device'.
type Options struct {
	Quick    bool
	Link     linkemu.Profile
	Schemes  []string // nil: all
	Protos   []string // "h1" (new connection per request), "h2" (one connection); nil: both
	Sizes    []int    // nil: PaperSizes (4, 256, 4096 with Quick)
	Requests int      // per size; 0: 100 (5 with Quick)
	// MaxBytes caps the bytes of one series: fewer requests (at least 3) for big files,
	// so a full run over 802.15.4 ends in hours, not days. 0: 2 MiB.
	MaxBytes int
	// Trace, if set, gets a line per packet on the link (time, direction, sizes, TCP flags).
	Trace    io.Writer
	Progress *lab.Progress
}

func (o *Options) defaults() {
	if o.Schemes == nil {
		o.Schemes = Schemes
	}
	if o.Protos == nil {
		o.Protos = []string{"h1", "h2"}
	}
	if o.Sizes == nil {
		o.Sizes = PaperSizes
		if o.Quick {
			o.Sizes = []int{4, 256, 4096}
		}
	}
	if o.Requests == 0 {
		o.Requests = 100
		if o.Quick {
			o.Requests = 5
		}
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 2 << 20
	}
}

// Row is one series: Requests sequential GETs of Size bytes by Scheme over Proto.
type Row struct {
	Scheme, Proto    string
	Size, Requests   int
	Seconds          float64
	LinkBytes        int64 // on the air: PHY and MAC overhead, ACKs, retransmissions
	IPBytes          int64 // IP packets carried, both directions
	Frames           int64
	AirTX, AirRX     time.Duration // device sending / receiving
	CPU              time.Duration // device-side processes: client, and agent or ssh
	Err              string
	Goodput          float64 // bit/s of file content
	Efficiency       float64 // file bytes over link bytes (goodput over link throughput)
	EfficiencyIP     float64 // file bytes over IP bytes (what interface counters would show)
	CPUJ, RadioJoule float64
}

// Results is a whole run.
type Results struct {
	Link    string
	Rows    []Row
	Skipped map[string]string
}

// devicePair is the emulated link with its two namespaces.
type devicePair struct{ *lab.LinkPair }

func newDevicePair(prof linkemu.Profile, tag string, trace linkemu.PacketFunc) (*devicePair, error) {
	p, err := lab.NewLinkPair(prof, tag, trace)
	if err != nil {
		return nil, err
	}
	return &devicePair{p}, nil
}

// getIn makes one HTTP GET from inside namespace ns.
func (p *devicePair) getIn(ctx context.Context, ns, url string) error {
	dial := p.DialIn(ns)
	tr := &http.Transport{DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return dial(addr) }}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

type linkSnap struct {
	bytes, ipBytes, frames int64
	tx, rx                 time.Duration
}

func (p *devicePair) snap() linkSnap {
	s0, s1 := &p.Bridge.Stats[0], &p.Bridge.Stats[1] // 0: device to gateway
	return linkSnap{bytes: s0.LinkBytes.Load() + s1.LinkBytes.Load(), ipBytes: s0.IPBytes.Load() + s1.IPBytes.Load(), frames: s0.Frames.Load() + s1.Frames.Load(),
		tx: time.Duration(s0.Airtime.Load()), rx: time.Duration(s1.Airtime.Load())}
}

// Measure is paper 000 section VI on an emulated link.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Link: o.Link.Name, Skipped: map[string]string{}}
	o.Progress.Start(len(o.Schemes) * len(o.Protos) * len(o.Sizes))
	defer o.Progress.Done()
	var trace linkemu.PacketFunc
	if o.Trace != nil {
		trace = packetTracer(o.Trace)
	}
	pair, err := newDevicePair(o.Link, "dev", trace)
	if err != nil {
		return res, err
	}
	defer pair.Close()
	client, stop, err := startEnds(ctx, b, pair)
	if err != nil {
		return res, err
	}
	defer stop()
	for _, scheme := range o.Schemes {
		base, tlsMode, helper, stop, err := startScheme(ctx, b, pair, scheme)
		if err != nil {
			res.Skipped[scheme] = err.Error()
			for range len(o.Protos) * len(o.Sizes) {
				o.Progress.Step(scheme + " skipped")
			}
			continue
		}
		for _, proto := range o.Protos {
			for _, size := range o.Sizes {
				n := max(3, min(o.Requests, o.MaxBytes/max(size, 1)))
				row := Row{Scheme: scheme, Proto: proto, Size: size, Requests: n}
				if err := client.series(&row, pair, helper, base, tlsMode, o.Trace); err != nil {
					stop()
					return res, err
				}
				res.Rows = append(res.Rows, row)
				o.Progress.Step(fmt.Sprintf("%-9s %s %6d B x %3d: efficiency %.3f, goodput %.0f bit/s %s", scheme, proto, size, n, row.Efficiency, row.Goodput, row.Err))
				if ctx.Err() != nil {
					stop()
					return res, ctx.Err()
				}
			}
		}
		stop()
	}
	return res, nil
}

// deviceClient is the device side's HTTP client process, driven a series at a time.
type deviceClient struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	answers *bufio.Scanner
}

// startEnds starts the gateway's file server and the device's client, each in its
// namespace; stop ends both.
func startEnds(ctx context.Context, b *lab.Bench, pair *devicePair) (*deviceClient, func(), error) {
	certFile, keyFile, _, err := lab.WriteCert(b.Dir)
	if err != nil {
		return nil, nil, err
	}
	files, err := lab.StartProc("files", nil, "ip", "netns", "exec", pair.GW, b.Bin, "bench", "serve-files",
		"--listen", "[::]:8080", "--tls-listen", "[::]:8443", "--cert", certFile, "--key", keyFile)
	if err != nil {
		return nil, nil, err
	}
	if err := lab.WaitTCPWith(ctx, files, "[fd77::2]:8443", pair.DialIn(pair.Dev)); err != nil {
		files.Stop()
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", pair.Dev, b.Bin, "bench", "device-client", "--ca", certFile)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := childproc.Start(cmd); err != nil {
		files.Stop()
		return nil, nil, err
	}
	c := &deviceClient{cmd: cmd, stdin: stdin, answers: bufio.NewScanner(stdout)}
	return c, func() { stdin.Close(); cmd.Wait(); files.Stop() }, nil
}

// series has the client make row.Requests GETs of row.Size bytes and fills in the row
// from the link's and the processes' counters around it.
func (c *deviceClient) series(row *Row, pair *devicePair, helper *lab.Proc, base, tlsMode string, trace io.Writer) error {
	pids := []int{c.cmd.Process.Pid}
	if helper != nil {
		pids = append(pids, helper.PID())
	}
	cpu0, l0 := cpuOf(pids), pair.snap()
	if trace != nil {
		fmt.Fprintf(trace, "# %s %s %d B x %d\n", row.Scheme, row.Proto, row.Size, row.Requests)
	}
	fmt.Fprintf(c.stdin, "%s %s %s %d %d\n", base, row.Proto, tlsMode, row.Requests, row.Size)
	if !c.answers.Scan() {
		return fmt.Errorf("lab: the device client stopped")
	}
	l1, cpu1 := pair.snap(), cpuOf(pids)
	var ns int64
	if _, err := fmt.Sscanf(c.answers.Text(), "ok %d", &ns); err != nil {
		row.Err = strings.TrimPrefix(c.answers.Text(), "err ")
	}
	row.Seconds = time.Duration(ns).Seconds()
	row.LinkBytes, row.IPBytes, row.Frames = l1.bytes-l0.bytes, l1.ipBytes-l0.ipBytes, l1.frames-l0.frames
	row.AirTX, row.AirRX, row.CPU = l1.tx-l0.tx, l1.rx-l0.rx, cpu1-cpu0
	if row.Err == "" && row.Seconds > 0 {
		payload := float64(row.Requests * row.Size)
		row.Goodput = payload * 8 / row.Seconds
		if row.LinkBytes > 0 {
			row.Efficiency = payload / float64(row.LinkBytes)
		}
		if row.IPBytes > 0 {
			row.EfficiencyIP = payload / float64(row.IPBytes)
		}
	}
	row.CPUJ = row.CPU.Seconds() * cpuWatts
	row.RadioJoule = lab.RadioJoules(row.AirTX, row.AirRX)
	return nil
}

// packetTracer writes "seconds dir ip_bytes frames link_bytes tcp_flags tcp_payload" per
// packet (dir: up = device to gateway). Scheme boundaries show as "#" lines.
func packetTracer(w io.Writer) linkemu.PacketFunc {
	var mu sync.Mutex
	start := time.Now()
	return func(dir int, pkt []byte, c linkemu.Cost) {
		d := "up"
		if dir == 1 {
			d = "down"
		}
		flags, payload := "-", 0
		if len(pkt) >= 60 && pkt[0]>>4 == 6 && pkt[6] == 6 { // IPv6 carrying TCP (no extension headers)
			tcp := pkt[40:]
			off := int(tcp[12]>>4) * 4
			payload = len(pkt) - 40 - off
			flags = ""
			for i, name := range []string{"F", "S", "R", "P", "A"} {
				if tcp[13]&(1<<i) != 0 {
					flags += name
				}
			}
		}
		mu.Lock()
		fmt.Fprintf(w, "%.6f %s %d %d %d %s %d\n", time.Since(start).Seconds(), d, len(pkt), c.Frames, c.LinkBytes, flags, payload)
		mu.Unlock()
	}
}

func cpuOf(pids []int) time.Duration {
	var t time.Duration
	for _, p := range pids {
		if c, err := lab.TreeCPU(p); err == nil {
			t += c
		}
	}
	return t
}

// startScheme prepares a scheme and returns the URL base the device client uses, its TLS
// mode, the device-side helper process (agent or ssh) whose CPU counts, and a stop.
func startScheme(ctx context.Context, b *lab.Bench, p *devicePair, scheme string) (base, tlsMode string, helper *lab.Proc, stop func(), err error) {
	nop := func() {}
	switch scheme {
	case "plain":
		return "http://[fd77::2]:8080", "none", nil, nop, nil
	case "https12":
		return "https://[fd77::2]:8443", "12", nil, nop, nil
	case "https13":
		return "https://[fd77::2]:8443", "13", nil, nop, nil
	case "iotsafe", "iotsafe_c":
		return startIoTsafeDevice(ctx, b, p, scheme == "iotsafe_c")
	case "openssh", "openssh_c":
		return startOpenSSHDevice(ctx, b, p, scheme == "openssh_c")
	}
	return "", "", nil, nil, fmt.Errorf("lab: unknown scheme %q", scheme)
}

// The paper's SSH algorithms: curve25519-sha256 and aes256-gcm (section V-A).
const (
	paperKex    = "curve25519-sha256"
	paperCipher = "aes256-gcm@openssh.com"
)

// startIoTsafeDevice runs a hub in the gateway namespace and the agent, configured as
// recommended for radio links (--coalesce, multiplexed by default), in the device namespace; with
// compress the profile allows compression and the agent asks for it (--compress).
func startIoTsafeDevice(ctx context.Context, b *lab.Bench, p *devicePair, compress bool) (string, string, *lab.Proc, func(), error) {
	dir, err := b.Scratch("device-iotsafe")
	if err != nil {
		return "", "", nil, nil, err
	}
	pool := sockets.Config{CIDR: "127.88.0.0/16"}
	cfg, err := hubpkg.ParseConfig(nil)
	if err != nil {
		return "", "", nil, nil, err
	}
	cfg.Log.Level, cfg.SSH.Listen, cfg.Pool, cfg.Access.Kernel = "error", "[fd77::2]:2222", pool, "off"
	cfg.SSH.Crypto.KeyExchanges, cfg.SSH.Crypto.Ciphers = []string{paperKex}, []string{paperCipher}
	if err := lab.WriteHubConfig(dir, cfg); err != nil {
		return "", "", nil, nil, err
	}
	// Enrolled as an operator would, with the CLI.
	adm := lab.Admin{Bin: b.Bin, Data: dir}
	if err := adm.Init(ctx); err != nil {
		return "", "", nil, nil, err
	}
	prof := &profile.Profile{Name: "lab-device", Reverse: map[string]int{}, Direct: map[string]string{"web": "127.0.0.1:8080"}, Compression: compress}
	keys := filepath.Join(dir, "keys")
	os.MkdirAll(keys, 0o700)
	pub, err := lab.NewKey(filepath.Join(keys, "dev0"), "dev0")
	if err == nil {
		err = lab.AddProfile(ctx, adm, prof)
	}
	if err == nil {
		_, err = adm.Import(ctx, "dev0 "+string(ssh.MarshalAuthorizedKey(pub)), "--profile", "lab-device")
	}
	if err != nil {
		return "", "", nil, nil, err
	}
	readyFile := filepath.Join(dir, "ready.json")
	hub, err := lab.StartProc("device-hub", nil, "ip", "netns", "exec", p.GW, b.Bin, "hub", "--announce=false", "--data", dir, "--ready-file", readyFile)
	if err != nil {
		return "", "", nil, nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := hub.ReadLine(rctx, "hub listening for devices on "); err != nil {
		hub.Stop()
		return "", "", nil, nil, err
	}
	ready, err := hubpkg.ReadReadyFile(readyFile)
	if err == nil && len(ready.HostKeys) == 0 {
		err = fmt.Errorf("lab: the hub's ready file names no host key")
	}
	if err != nil {
		hub.Stop()
		return "", "", nil, nil, err
	}
	args := []string{"netns", "exec", p.Dev, b.Bin, "agent", "--hub", "[fd77::2]:2222",
		"--key", filepath.Join(keys, "dev0"), "--hub-key", ready.HostKeys[0].Fingerprint, "--forward", "127.0.0.1:18080=web", "--log-level", "info", "--coalesce"}
	if compress {
		args = append(args, "--compress")
	}
	agent, err := lab.StartProc("device-agent", nil, append([]string{"ip"}, args...)...)
	if err != nil {
		hub.Stop()
		return "", "", nil, nil, err
	}
	stop := func() { agent.Stop(); hub.Stop() }
	if err := lab.WaitTCPWith(ctx, agent, "127.0.0.1:18080", p.DialIn(p.Dev)); err != nil {
		stop()
		return "", "", nil, nil, err
	}
	// The agent listens before its session is up (connections wait for it): one request
	// through the forward, so the SSH handshake is not counted in the first series.
	if err := p.getIn(ctx, p.Dev, "http://127.0.0.1:18080/1"); err != nil {
		stop()
		return "", "", nil, nil, fmt.Errorf("lab: first request through the agent: %w", err)
	}
	// The agent says so once the hub agreed; a scheme measured in the wrong mode by
	// mistake would be worse than none.
	want := `msg="multiplexing on"`
	if compress {
		want = `msg="compression on"`
	}
	if !strings.Contains(agent.StderrTail(), want) {
		stop()
		return "", "", nil, nil, fmt.Errorf("lab: the agent did not negotiate its mode (%s):\n%s", want, agent.StderrTail())
	}
	return "http://127.0.0.1:18080", "none", agent, stop, nil
}

func startOpenSSHDevice(ctx context.Context, b *lab.Bench, p *devicePair, compress bool) (string, string, *lab.Proc, func(), error) {
	dir, err := b.Scratch("device-openssh")
	if err != nil {
		return "", "", nil, nil, err
	}
	cfgFile, keys, _, err := lab.PrepareSSHD(dir, "[fd77::2]:2200", "KexAlgorithms "+paperKex+"\nCiphers "+paperCipher+"\n")
	if err != nil {
		return "", "", nil, nil, err
	}
	sshd, err := lab.StartProc("device-sshd", nil, "ip", "netns", "exec", p.GW, "/usr/sbin/sshd", "-D", "-e", "-f", cfgFile)
	if err != nil {
		return "", "", nil, nil, err
	}
	if err := lab.WaitTCPWith(ctx, sshd, "[fd77::2]:2200", p.DialIn(p.Dev)); err != nil {
		sshd.Stop()
		return "", "", nil, nil, err
	}
	comp := "no"
	if compress {
		comp = "yes"
	}
	cl, err := lab.StartProc("device-ssh", nil, "ip", "netns", "exec", p.Dev, "ssh", "-N", "-F", "/dev/null",
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "Compression="+comp, "-o", "KexAlgorithms="+paperKex, "-c", paperCipher,
		"-i", filepath.Join(keys, "client"), "-p", "2200", "-L", "127.0.0.1:18081:127.0.0.1:8080", "root@fd77::2")
	if err != nil {
		sshd.Stop()
		return "", "", nil, nil, err
	}
	stop := func() { cl.Stop(); sshd.Stop() }
	if err := lab.WaitTCPWith(ctx, cl, "127.0.0.1:18081", p.DialIn(p.Dev)); err != nil {
		stop()
		return "", "", nil, nil, err
	}
	return "http://127.0.0.1:18081", "none", cl, stop, nil
}
