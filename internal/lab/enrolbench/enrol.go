package enrolbench

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// The ways a fleet is enrolled.
const (
	WayJoin   = "join-token"    // each device, over SSH, with one token
	WayImport = "device-import" // the operator, one 'iotsafe device import' of every key
	WayCert   = "certificate"   // each device, on its first login, with a manufacturer's certificate (zero-touch)
)

// Options of a run.
type Options struct {
	Devices     int // 0 means 10,000 (20 with Quick)
	Concurrency int // devices joining at once; 0 means 200
	Quick       bool
	Progress    *lab.Progress
}

func (o *Options) defaults() error {
	if o.Devices < 0 || o.Concurrency < 0 {
		return errors.New("--devices and --concurrency must not be negative")
	}
	lab.Default(&o.Devices, o.Quick, 10000, 20)
	lab.Default(&o.Concurrency, false, 200, 200)
	if o.Progress == nil {
		o.Progress = &lab.Progress{W: io.Discard}
	}
	return nil
}

// Way is one way's run on a fresh hub.
type Way struct {
	Name     string
	Devices  int // enrolled
	Failures int
	Errors   map[string]int
	Elapsed  time.Duration
	HubCPU   time.Duration
	// Memory of the hub, and the registry's size on disk (its database and WAL), before
	// and after.
	Base, After         lab.Memory
	RegBase, RegAfter   int64
	ConcurrencyAchieved int
}

// Results of a run.
type Results struct {
	Options Options
	Ways    []Way
}

// Measure enrols the fleet each way.
func Measure(ctx context.Context, b *lab.Bench, o Options) (Results, error) {
	res := Results{Options: o}
	if err := o.defaults(); err != nil {
		return res, err
	}
	res.Options = o
	lab.RaiseFileLimit(o.Progress)
	o.Progress.Start(4)
	o.Progress.Step(fmt.Sprintf("making %d device keys (on the devices' side; not timed)", o.Devices))
	keys := make([]ed25519.PrivateKey, o.Devices)
	for i := range keys {
		_, keys[i], _ = ed25519.GenerateKey(rand.Reader)
	}
	for _, way := range []string{WayJoin, WayCert, WayImport} {
		o.Progress.Step(fmt.Sprintf("%s: %d devices", way, o.Devices))
		w, err := enrolWay(ctx, b, o, way, keys)
		res.Ways = append(res.Ways, w)
		if err != nil {
			return res, fmt.Errorf("%s: %w", way, err)
		}
	}
	o.Progress.Done()
	return res, nil
}

// name is device i's name.
func name(i int) string { return fmt.Sprintf("dev-%05d", i) }

func enrolWay(ctx context.Context, b *lab.Bench, o Options, way string, keys []ed25519.PrivateKey) (Way, error) {
	w := Way{Name: way, Errors: map[string]int{}}
	opts := lab.IoTsafeOpts{Sessions: 1, Prefix: "seed-", Configure: func(c *hub.Config) {
		// The whole fleet arrives from this machine: the handshake caps must admit the
		// bench's concurrency (a real fleet comes from many addresses).
		c.SSH.MaxHandshakes = max(c.SSH.MaxHandshakes, o.Concurrency+64)
	}}
	lh, err := b.EnrollIoTsafe(ctx, "enrol-"+way, opts)
	if err != nil {
		return w, err
	}
	srv, err := b.StartEnrolled(ctx, lh, opts)
	if err != nil {
		return w, err
	}
	defer srv.Proc.Stop()
	adm := lab.Admin{Bin: b.Bin, Data: srv.DataDir()}
	lab.Sleep(ctx, 2*time.Second)
	w.Base, _ = lab.TreeMemory(srv.Proc.PID())
	w.RegBase = registrySize(srv.DataDir())
	c0, err := lab.TreeCPU(srv.Proc.PID())
	if err != nil {
		return w, err
	}
	start := time.Now()
	switch way {
	case WayJoin:
		err = joinAll(ctx, &w, adm, srv, keys, o.Concurrency)
	case WayImport:
		err = importAll(ctx, &w, adm, keys)
	case WayCert:
		err = certAll(ctx, &w, adm, srv, keys, o.Concurrency)
	}
	w.Elapsed = time.Since(start)
	c1, _ := lab.TreeCPU(srv.Proc.PID())
	w.HubCPU = c1 - c0
	lab.Sleep(ctx, 2*time.Second)
	w.After, _ = lab.TreeMemory(srv.Proc.PID())
	w.RegAfter = registrySize(srv.DataDir())
	return w, err
}

// joinAll has every device join with one token, concurrency at once, each from a
// loopback address of its own per eight devices (the hub allows ten join commands at
// once per source address).
func joinAll(ctx context.Context, w *Way, adm lab.Admin, srv *lab.SSHServer, keys []ed25519.PrivateKey, concurrency int) error {
	out, err := adm.Run(ctx, nil, "token", "create", "--names", "dev-*", "--uses", fmt.Sprint(len(keys)), "--ttl", "2h", "-o", "json")
	if err != nil {
		return err
	}
	var tok struct {
		Token  string `json:"token"`
		HubKey string `json:"hub_key"`
	}
	if err := json.Unmarshal(out, &tok); err != nil {
		return fmt.Errorf("token create: %w", err)
	}
	return everyDevice(w, len(keys), concurrency, func(i int) error {
		return joinOne(ctx, srv.Addr, tok.HubKey, tok.Token, name(i), keys[i], i/8)
	})
}

// everyDevice runs enrol for devices 0..n-1, concurrency at once, and counts.
func everyDevice(w *Way, n, concurrency int, enrol func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(concurrency)
	var mu sync.Mutex
	var ok, failed atomic.Int64
	for i := range n {
		g.Go(func() error {
			if err := enrol(i); err != nil {
				failed.Add(1)
				mu.Lock()
				w.Errors[trimErr(err)]++
				mu.Unlock()
				return nil
			}
			ok.Add(1)
			return nil
		})
	}
	g.Wait()
	w.Devices, w.Failures = int(ok.Load()), int(failed.Load())
	if w.Failures > 0 {
		return fmt.Errorf("%d of %d enrolments failed: %v", w.Failures, n, w.Errors)
	}
	return nil
}

// certAll has every device log in once with a certificate of a manufacturer's CA the
// hub trusts for dev-*: each is enrolled on that login (zero-touch). The certificates
// are signed before the clock starts, as at the factory.
func certAll(ctx context.Context, w *Way, adm lab.Admin, srv *lab.SSHServer, keys []ed25519.PrivateKey, concurrency int) error {
	_, caKey, _ := ed25519.GenerateKey(rand.Reader)
	ca, err := ssh.NewSignerFromKey(caKey)
	if err != nil {
		return err
	}
	caFile := filepath.Join(adm.Data, "factory-ca.pub")
	if err := os.WriteFile(caFile, ssh.MarshalAuthorizedKey(ca.PublicKey()), 0o644); err != nil {
		return err
	}
	if _, err := adm.Run(ctx, nil, "ca", "trust", caFile, "--name", "factory", "--names", "dev-*", "--profile", "default"); err != nil {
		return err
	}
	hubKey, err := adm.Run(ctx, nil, "hostkey", "list", "-o", "json")
	if err != nil {
		return err
	}
	var entries []struct{ State, Fingerprint string }
	if err := json.Unmarshal(hubKey, &entries); err != nil || len(entries) == 0 {
		return fmt.Errorf("hostkey list: %v", err)
	}
	signers := make([]ssh.Signer, len(keys))
	now := time.Now()
	for i, k := range keys {
		s, err := ssh.NewSignerFromKey(k)
		if err != nil {
			return err
		}
		cert := &ssh.Certificate{Key: s.PublicKey(), Serial: uint64(i + 1), CertType: ssh.UserCert, KeyId: name(i),
			ValidPrincipals: []string{name(i)}, ValidAfter: uint64(now.Add(-time.Hour).Unix()), ValidBefore: uint64(now.Add(24 * time.Hour).Unix())}
		if err := cert.SignCert(rand.Reader, ca); err != nil {
			return err
		}
		if signers[i], err = ssh.NewCertSigner(cert, s); err != nil {
			return err
		}
	}
	return everyDevice(w, len(keys), concurrency, func(i int) error {
		c, err := dialAs(ctx, srv.Addr, entries[0].Fingerprint, name(i), signers[i], i/8)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// joinOne is one device's join: as sshext.JoinUser with its key, "join NAME TOKEN".
func joinOne(ctx context.Context, addr, hubKey, token, dev string, key ed25519.PrivateKey, src int) error {
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return err
	}
	client, err := dialAs(ctx, addr, hubKey, sshext.JoinUser, signer, src)
	if err != nil {
		return err
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errOut
	if err := sess.Run("join " + dev + " " + token); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut.String()))
	}
	var ans sshext.JoinAnswer
	if json.Unmarshal(out.Bytes(), &ans) != nil || ans.Device != dev {
		return fmt.Errorf("not a join's answer: %q", out.String())
	}
	return nil
}

// dialAs logs in to the hub as user with signer, from loopback address number src
// (the hub caps handshakes and joins per source address).
func dialAs(ctx context.Context, addr, hubKey, user string, signer ssh.Signer, src int) (*ssh.Client, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 4, byte(src/250), byte(src%250+1))}, Timeout: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Timeout: 30 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error {
			if ssh.FingerprintSHA256(k) != hubKey {
				return errors.New("not the hub's host key")
			}
			return nil
		}}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// importAll enrols every key with one 'iotsafe device import' through the running hub.
func importAll(ctx context.Context, w *Way, adm lab.Admin, keys []ed25519.PrivateKey) error {
	var list bytes.Buffer
	for i, k := range keys {
		pub, _ := ssh.NewPublicKey(k.Public())
		fmt.Fprintf(&list, "%s %s", name(i), ssh.MarshalAuthorizedKey(pub))
	}
	f := filepath.Join(adm.Data, "fleet.txt")
	if err := os.WriteFile(f, list.Bytes(), 0o600); err != nil {
		return err
	}
	if _, err := adm.Run(ctx, nil, "device", "import", f); err != nil {
		return err
	}
	w.Devices = len(keys)
	return nil
}

// registrySize is the registry's SQLite files' size in bytes.
func registrySize(dir string) int64 {
	var n int64
	for _, f := range []string{registry.FileName, registry.FileName + "-wal"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}
