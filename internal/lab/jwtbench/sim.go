package jwtbench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Transports of the experiment.
const (
	HTTPS    = "https"     // one keep-alive TLS connection per device, as the paper's threads
	HTTPSNew = "https-new" // a new TLS connection per request (resuming the TLS session)
	SSH      = "ssh"       // the device's SSH session: plain HTTP over a direct forward, no token
)

// Transports in report order.
var Transports = []string{HTTPS, HTTPSNew, SSH}

// SimConfig is one run of the device simulator.
type SimConfig struct {
	Transport string
	Addr      string // the front door (https, https-new) or the hub's SSH listener (ssh)
	Domain    string // the front door's domain: TLS server name and Host
	CAFile    string // the front door's CA (PEM)
	Secrets   string // https*: file of "NAME SECRET" lines, one per device
	HostKey   string // ssh: the hub's public host key (authorized_keys format)
	KeyDir    string // ssh: private keys, one file per device name
	Alias     string // ssh: the profile's direct alias of the hub's plain REST listener
	Devices   int
	// Rate is notifications per second per device; 0 is the paper's closed loop (each
	// device sends as soon as the previous answer came).
	Rate float64
	// Warmup runs before the measured Duration, after every device logged in.
	Warmup, Duration time.Duration
	Timeout          time.Duration // per request; longer counts as incomplete
	// Each device drops its connection and logs in again after U(DisconnectMin,
	// DisconnectMax) (paper: 10 s to 1440 s); 0 never.
	DisconnectMin, DisconnectMax time.Duration
	Parallel                     int // concurrent logins while starting
	// Sources, if valid, gives device i the source address Sources.Addr()+i+1 (devices
	// have addresses of their own: the front door bounds connections per address).
	Sources netip.Prefix
}

// SimResult is what one simulator run measured: requests whose (planned) start fell in
// the measured window.
type SimResult struct {
	Transport  string           `json:"transport"`
	Devices    int              `json:"devices"`
	Rate       float64          `json:"rate"`
	Window     float64          `json:"window_s"`
	Complete   int64            `json:"complete"`
	Incomplete int64            `json:"incomplete"`
	Errors     map[string]int64 `json:"errors,omitempty"`
	FirstError string           `json:"first_error,omitempty"`
	// Logins are token logins (https*) or SSH logins (ssh), at start and after
	// disconnects; Refreshes renew the 30 s access token.
	Logins        int64 `json:"logins"`
	LoginFailures int64 `json:"login_failures"`
	Refreshes     int64 `json:"refreshes"`
	Disconnects   int64 `json:"disconnects"`
	// Client is the paper's client time: request sent to answer read.
	Client Latency `json:"client"`
	// Scheduled, in rate mode, counts from the planned send time, so a device that fell
	// behind its schedule shows it (no coordinated omission).
	Scheduled Latency `json:"scheduled"`
	// Startup is how long logging every device in took.
	Startup float64 `json:"startup_s"`
	// CPU is the simulator's own CPU time in the window: the load generator's share of
	// the machine.
	CPU float64 `json:"cpu_s"`
}

// Lines the simulator prints for the bench (each alone on a line).
const (
	lineReady   = "ready "
	lineBegin   = "measure begin"
	lineEnd     = "measure end"
	lineResult  = "result "
	apiPrefix   = "/api/rest"
	refreshSlop = 2 * time.Second // renew this long before the access token expires
)

// sim is one simulator run's shared state.
type sim struct {
	cfg        SimConfig
	tls        *tls.Config
	sshCfg     func(name string) (*ssh.ClientConfig, error)
	begin, end time.Time
	client     Hist
	scheduled  Hist
	complete   atomic.Int64
	incomplete atomic.Int64
	logins     atomic.Int64
	loginFails atomic.Int64
	refreshes  atomic.Int64
	drops      atomic.Int64
	mu         sync.Mutex
	errs       map[string]int64
	firstErr   string
}

// RunSim runs cfg.Devices simulated devices and prints the readiness lines and, at the
// end, "result JSON" on out.
func RunSim(ctx context.Context, cfg SimConfig, out io.Writer) error {
	if cfg.Devices <= 0 {
		return errors.New("jwt-sim: --devices must be at least 1")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 64
	}
	s := &sim{cfg: cfg, errs: map[string]int64{}}
	devs, err := s.devices()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := s.loginAll(ctx, devs); err != nil {
		return err
	}
	startup := time.Since(start)
	fmt.Fprintf(out, "%s%d %d\n", lineReady, len(devs)-int(s.loginFails.Load()), s.loginFails.Load())
	now := time.Now()
	s.begin, s.end = now.Add(cfg.Warmup), now.Add(cfg.Warmup+cfg.Duration)
	var cpu [2]time.Duration
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		for i, m := range []struct {
			at   time.Time
			line string
		}{{s.begin, lineBegin}, {s.end, lineEnd}} {
			select {
			case <-time.After(time.Until(m.at)):
				cpu[i] = selfCPU()
				fmt.Fprintln(out, m.line)
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for _, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.run(ctx, now)
			d.drop(true)
		}()
	}
	wg.Wait()
	<-marked
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r := SimResult{CPU: (cpu[1] - cpu[0]).Seconds(), Transport: cfg.Transport, Devices: len(devs), Rate: cfg.Rate, Window: cfg.Duration.Seconds(),
		Complete: s.complete.Load(), Incomplete: s.incomplete.Load(), FirstError: s.firstErr,
		Logins: s.logins.Load(), LoginFailures: s.loginFails.Load(), Refreshes: s.refreshes.Load(), Disconnects: s.drops.Load(),
		Client: s.client.Summary(), Scheduled: s.scheduled.Summary(), Startup: startup.Seconds()}
	if len(s.errs) > 0 {
		r.Errors = s.errs
	}
	b, _ := json.Marshal(r)
	fmt.Fprintf(out, "%s%s\n", lineResult, b)
	return nil
}

// loginAll logs every device in, cfg.Parallel at a time; a device that fails is counted
// and the rest go on.
func (s *sim) loginAll(ctx context.Context, devs []*device) error {
	sem := make(chan struct{}, s.cfg.Parallel)
	var wg sync.WaitGroup
	for _, d := range devs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.login(ctx); err != nil {
				s.loginFails.Add(1)
				s.fail(err)
			}
		}()
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	return ctx.Err()
}

// devices builds the simulated devices from the secrets file or the key folder.
func (s *sim) devices() ([]*device, error) {
	cfg := s.cfg
	var devs []*device
	switch cfg.Transport {
	case HTTPS, HTTPSNew:
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("jwt-sim: --ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("jwt-sim: --ca %s: no certificate", cfg.CAFile)
		}
		s.tls = &tls.Config{RootCAs: pool, ServerName: cfg.Domain, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
		b, err := os.ReadFile(cfg.Secrets)
		if err != nil {
			return nil, fmt.Errorf("jwt-sim: --secrets: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			name, secret, ok := strings.Cut(strings.TrimSpace(l), " ")
			if !ok {
				continue
			}
			devs = append(devs, &device{s: s, name: name, secret: secret, src: s.source(len(devs))})
			if len(devs) == cfg.Devices {
				break
			}
		}
	case SSH:
		b, err := os.ReadFile(cfg.HostKey)
		if err != nil {
			return nil, fmt.Errorf("jwt-sim: --host-key: %w", err)
		}
		hk, _, _, _, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			return nil, fmt.Errorf("jwt-sim: --host-key: %w", err)
		}
		s.sshCfg = func(name string) (*ssh.ClientConfig, error) {
			kb, err := os.ReadFile(filepath.Join(cfg.KeyDir, name))
			if err != nil {
				return nil, err
			}
			signer, err := ssh.ParsePrivateKey(kb)
			if err != nil {
				return nil, err
			}
			return &ssh.ClientConfig{User: name, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
				HostKeyCallback: ssh.FixedHostKey(hk), Timeout: cfg.Timeout}, nil
		}
		for i := range cfg.Devices {
			devs = append(devs, &device{s: s, name: fmt.Sprintf("dev%d", i), src: s.source(i)})
		}
	default:
		return nil, fmt.Errorf("jwt-sim: transport %q is not one of %s", cfg.Transport, strings.Join(Transports, ", "))
	}
	if len(devs) < cfg.Devices {
		return nil, fmt.Errorf("jwt-sim: %d devices asked, %d enrolled", cfg.Devices, len(devs))
	}
	return devs, nil
}

// selfCPU is this process's CPU time so far (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// source is device i's address, or nil to let the system choose.
func (s *sim) source(i int) net.Addr {
	p := s.cfg.Sources
	if !p.IsValid() || !p.Addr().Is4() {
		return nil
	}
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i) + 1
	a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	if !p.Contains(a) {
		return nil
	}
	return &net.TCPAddr{IP: a.AsSlice()}
}

// fail counts an error by kind and keeps the first one's text.
func (s *sim) fail(err error) {
	kind := errKind(err)
	s.mu.Lock()
	s.errs[kind]++
	if s.firstErr == "" {
		s.firstErr = err.Error()
	}
	s.mu.Unlock()
}

// statusError is an answer other than the one expected.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.code, e.body) }

func errKind(err error) string {
	var se *statusError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("status %d", se.code)
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed by hub"
	}
	return "connection"
}

// device is one simulated device: its connection, tokens and schedule.
type device struct {
	s              *sim
	name, secret   string
	src            net.Addr // source address, nil for any
	rng            *rand.Rand
	sshc           *ssh.Client
	conn           net.Conn
	br             *bufio.Reader
	tlsCache       tls.ClientSessionCache
	wbuf, rbuf     []byte // the request being sent, the answer's body
	body           []byte // the notification being sent
	path           string // where notifications go
	access, reauth string
	expires        time.Time
	disconnectAt   time.Time
}

// run sends notifications until the window ends.
func (d *device) run(ctx context.Context, t0 time.Time) {
	s, cfg := d.s, d.s.cfg
	d.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var period time.Duration
	next := t0
	if cfg.Rate > 0 {
		period = time.Duration(float64(time.Second) / cfg.Rate)
		next = t0.Add(time.Duration(d.rng.Int64N(int64(period)))) // devices spread over a period
	}
	d.planDisconnect(t0)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		if period > 0 {
			if wait := time.Until(next); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
		} else {
			next = time.Now()
		}
		if !next.Before(s.end) {
			return
		}
		err := d.prepare(ctx)
		var sent, done time.Time
		if err == nil {
			sent = time.Now()
			err = d.notify(ctx)
			done = time.Now()
		}
		if !next.Before(s.begin) {
			if err != nil {
				s.incomplete.Add(1)
				s.fail(err)
			} else {
				s.complete.Add(1)
				s.client.Record(done.Sub(sent))
				if period > 0 {
					s.scheduled.Record(done.Sub(next))
				}
			}
		}
		if err != nil {
			d.drop(true)
			if se := (*statusError)(nil); errors.As(err, &se) && se.code == http.StatusUnauthorized {
				d.access = "" // log in again
			}
			select { // do not spin against a refusing hub
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		next = next.Add(period)
	}
}

func (d *device) planDisconnect(from time.Time) {
	lo, hi := d.s.cfg.DisconnectMin, d.s.cfg.DisconnectMax
	if lo <= 0 || hi < lo {
		d.disconnectAt = time.Time{}
		return
	}
	d.disconnectAt = from.Add(lo + time.Duration(d.rng.Int64N(int64(hi-lo)+1)))
}

// prepare makes the device ready to send: the planned disconnect, a login, a renewed
// access token.
func (d *device) prepare(ctx context.Context) error {
	if now := time.Now(); !d.disconnectAt.IsZero() && now.After(d.disconnectAt) {
		d.drop(true)
		d.access = ""
		d.s.drops.Add(1)
		d.planDisconnect(now)
	}
	if d.s.cfg.Transport == SSH {
		if d.sshc == nil {
			return d.login(ctx)
		}
		return nil
	}
	if d.access == "" {
		return d.login(ctx)
	}
	if time.Until(d.expires) < refreshSlop {
		return d.refresh(ctx)
	}
	return nil
}

// login opens the device's session: an SSH login, or POST /token with its secret.
func (d *device) login(ctx context.Context) error {
	d.s.logins.Add(1)
	if d.s.cfg.Transport == SSH {
		cc, err := d.s.sshCfg(d.name)
		if err != nil {
			return err
		}
		raw, err := (&net.Dialer{LocalAddr: d.src, Timeout: d.s.cfg.Timeout}).DialContext(ctx, "tcp", d.s.cfg.Addr)
		if err != nil {
			return err
		}
		raw.SetDeadline(time.Now().Add(d.s.cfg.Timeout))
		conn, chans, reqs, err := ssh.NewClientConn(raw, d.s.cfg.Addr, cc)
		if err != nil {
			raw.Close()
			return err
		}
		raw.SetDeadline(time.Time{})
		d.sshc = ssh.NewClient(conn, chans, reqs)
		return nil
	}
	body, _ := json.Marshal(map[string]string{"login": d.name, "password": d.secret})
	var tp struct {
		AccessToken  string `json:"accessToken"`
		RefreshToken string `json:"refreshToken"`
	}
	if err := d.call(ctx, apiPrefix+"/token", "", body, &tp); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	d.reauth = tp.RefreshToken
	return d.setAccess(tp.AccessToken)
}

func (d *device) refresh(ctx context.Context) error {
	d.s.refreshes.Add(1)
	body, _ := json.Marshal(map[string]string{"refreshToken": d.reauth})
	var tp struct {
		AccessToken string `json:"accessToken"`
	}
	if err := d.call(ctx, apiPrefix+"/token/refresh", "", body, &tp); err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	return d.setAccess(tp.AccessToken)
}

// setAccess keeps an access token and when it expires (read from its payload, as a
// device library does; the hub checks the signature).
func (d *device) setAccess(tok string) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return fmt.Errorf("the hub sent no access token")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("access token payload: %w", err)
	}
	var c struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Exp == 0 {
		return fmt.Errorf("access token without exp")
	}
	d.access, d.expires = tok, time.Unix(c.Exp, 0)
	return nil
}

// notify posts one notification carrying a random UUID (36 bytes, the paper's payload).
func (d *device) notify(ctx context.Context) error {
	var u [16]byte
	for i := 0; i < 16; i += 8 {
		binary.LittleEndian.PutUint64(u[i:], d.rng.Uint64())
	}
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	b := append(d.body[:0], `{"notification":"uuid","parameters":{"uuid":"`...)
	for i, part := range [][]byte{u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]} {
		if i > 0 {
			b = append(b, '-')
		}
		b = hex.AppendEncode(b, part)
	}
	d.body = append(b, `"}}`...)
	auth := ""
	if d.s.cfg.Transport != SSH {
		auth = d.access
	}
	if d.path == "" {
		d.path = apiPrefix + "/device/" + d.name + "/notification"
	}
	return d.call(ctx, d.path, auth, d.body, nil)
}

// call posts body to path and expects 201 Created; out, if set, receives the JSON.
func (d *device) call(ctx context.Context, path, bearer string, body []byte, out any) error {
	c, br, err := d.connect(ctx)
	if err != nil {
		return err
	}
	cfg := d.s.cfg
	host := cfg.Domain
	if cfg.Transport == SSH {
		host = cfg.Alias
	}
	d.wbuf = appendRequest(d.wbuf[:0], path, host, bearer, cfg.Transport == HTTPSNew, body)
	c.SetDeadline(time.Now().Add(cfg.Timeout))
	if _, err := c.Write(d.wbuf); err != nil {
		return err
	}
	code, rb, closing, err := readAnswer(br, d.rbuf)
	if err != nil {
		return err
	}
	d.rbuf = rb
	if closing || cfg.Transport == HTTPSNew {
		d.drop(false)
	}
	if code != http.StatusCreated {
		return &statusError{code: code, body: strings.TrimSpace(string(rb))}
	}
	if out != nil {
		return json.Unmarshal(rb, out)
	}
	return nil
}

// connect returns the device's connection, opening one if it has none.
func (d *device) connect(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	if d.conn != nil {
		return d.conn, d.br, nil
	}
	cfg := d.s.cfg
	var c net.Conn
	var err error
	if cfg.Transport == SSH {
		if d.sshc == nil {
			return nil, nil, errors.New("no SSH session")
		}
		c, err = d.sshc.Dial("tcp", net.JoinHostPort(cfg.Alias, "80"))
	} else {
		dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		var raw net.Conn
		if raw, err = (&net.Dialer{LocalAddr: d.src}).DialContext(dctx, "tcp", cfg.Addr); err == nil {
			if d.tlsCache == nil {
				d.tlsCache = tls.NewLRUClientSessionCache(1)
			}
			tc := d.s.tls.Clone()
			tc.ClientSessionCache = d.tlsCache
			t := tls.Client(raw, tc)
			if err = t.HandshakeContext(dctx); err != nil {
				raw.Close()
			}
			c = t
		}
	}
	if err != nil {
		return nil, nil, err
	}
	d.conn, d.br = c, bufio.NewReaderSize(c, 2048)
	return c, d.br, nil
}

// drop closes the device's connection; session also ends its SSH session.
func (d *device) drop(session bool) {
	if d.conn != nil {
		d.conn.Close()
		d.conn, d.br = nil, nil
	}
	if session && d.sshc != nil {
		d.sshc.Close()
		d.sshc = nil
	}
}
