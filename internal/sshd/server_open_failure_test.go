package sshd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshwire"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// recordLog keeps the server's log records so a test can count its events.
type recordLog struct {
	mu      sync.Mutex
	recs    []map[string]string
	changed chan struct{} // closed and replaced at every record
}

func newRecordLog() *recordLog { return &recordLog{changed: make(chan struct{})} }

// wait blocks until a record with the message and key/value pairs has come.
func (r *recordLog) wait(t *testing.T, msg string, kv ...string) {
	t.Helper()
	r.waitN(t, 1, msg, kv...)
}

// waitN blocks until n records with the message and key/value pairs have come. The
// 30 s deadline is a failure guard, not a timing assertion.
func (r *recordLog) waitN(t *testing.T, n int, msg string, kv ...string) {
	t.Helper()
	guard := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if r.count(msg, kv...) >= n {
			return
		}
		select {
		case <-changed:
		case <-guard:
			t.Fatalf("log record %q %v never came", msg, kv)
		}
	}
}

func (r *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &boundLog{r: r, attrs: as}
}
func (r *recordLog) WithGroup(string) slog.Handler { return r }
func (r *recordLog) Handle(_ context.Context, rec slog.Record) error {
	return (&boundLog{r: r}).Handle(context.Background(), rec)
}

// count is how many records have the message and the key/value pairs.
func (r *recordLog) count(msg string, kv ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
next:
	for _, m := range r.recs {
		if m["msg"] != msg {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if m[kv[i]] != kv[i+1] {
				continue next
			}
		}
		n++
	}
	return n
}

// boundLog is a child logger of recordLog (With("device", ...)).
type boundLog struct {
	r     *recordLog
	attrs []slog.Attr
}

func (b *boundLog) Enabled(context.Context, slog.Level) bool { return true }
func (b *boundLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &boundLog{r: b.r, attrs: append(append([]slog.Attr{}, b.attrs...), as...)}
}
func (b *boundLog) WithGroup(string) slog.Handler { return b }
func (b *boundLog) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message, "level": rec.Level.String()}
	for _, a := range b.attrs {
		m[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	b.r.mu.Lock()
	b.r.recs = append(b.r.recs, m)
	close(b.r.changed)
	b.r.changed = make(chan struct{})
	b.r.mu.Unlock()
	return nil
}

// personGets connects to a protected socket as a person would and reads until the hub
// closes the connection: what the person got.
func personGets(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		// The hub aborted the connection (a reset stream is passed on as a RST) before
		// Dial had read the connect's outcome: refused, as cleanly as by a close.
		return ""
	}
	if err != nil {
		t.Fatalf("the protected socket %s no longer accepts: %v", addr, err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c) // a reset is as clean a refusal as a close
	return string(b)
}

// forwardHTTP asks for the reverse forward "http" and returns its protected socket.
func (f *fixture) forwardHTTP(t *testing.T, conn ssh.Conn, device string) string {
	t.Helper()
	if ok, _, err := conn.SendRequest("tcpip-forward", true, ssh.Marshal(sshwire.ForwardRequest{Addr: "http", Port: 80})); err != nil || !ok {
		t.Fatalf("tcpip-forward: %v %v", ok, err)
	}
	return f.socketOf(t, device)
}

func (f *fixture) socketOf(t *testing.T, device string) string {
	t.Helper()
	d, err := f.reg.Device(context.Background(), device)
	if err != nil || len(d.Sockets) != 1 {
		t.Fatalf("%s: %+v %v", device, d, err)
	}
	return d.Sockets[0].Addr.String()
}

// serveHello answers a channel or stream the hub opened with "hello" and an EOF, as an
// agent does (closing a multiplexed stream before both EOFs would reset it).
func serveHello(ch interface {
	io.Writer
	CloseWrite() error
}) {
	io.WriteString(ch, "hello")
	ch.CloseWrite()
}

const maxChannelsForOpenTests = 3

// Issue 56: a device whose end of a forwarded connection fails before or during the
// open took the whole hub down (a nil release called by a deferred cleanup). On every
// such path the person gets a closed connection, the refusal is logged once, the
// channel slot comes back (more than max_channels refusals in a row, then max_channels
// connections at once), and the hub keeps serving.
func TestDeviceEndFailingToOpenIsRefusedCleanly(t *testing.T) {
	prof := "name: p\nreverse: {http: 0}\nmax_channels: 3\n"
	cases := []struct {
		name string
		// refuse serves the device's side so that every open fails; serve makes the
		// device serve "hello" from then on (nil: the session is gone and the device
		// connects again for that part).
		refuse func(conn ssh.Conn, chans <-chan ssh.NewChannel, serve <-chan struct{})
	}{
		{"channel refused (ssh -R to a service that is down)", func(_ ssh.Conn, chans <-chan ssh.NewChannel, serve <-chan struct{}) {
			for nc := range chans {
				select {
				case <-serve:
					ch, reqs, err := nc.Accept()
					if err == nil {
						go ssh.DiscardRequests(reqs)
						go serveHello(ch)
					}
				default:
					// What OpenSSH sends when its connect to the target fails.
					nc.Reject(ssh.ConnectionFailed, "open failed")
				}
			}
		}},
		{"multiplexed stream reset (the agent's service is down)", func(conn ssh.Conn, chans <-chan ssh.NewChannel, serve <-chan struct{}) {
			ended := sshext.Ended(conn)
			ch, reqs, err := sshext.OpenChannel(conn, ended, sshext.MuxChannel, ssh.Marshal(sshext.MuxOpen{Mode: sshext.MuxPlain + sshext.MuxV2}))
			if err != nil {
				return
			}
			go ssh.DiscardRequests(reqs)
			m := zmux.New(ch, zmux.Options{Device: true, Version2: true})
			for {
				st, err := m.Accept()
				if err != nil {
					return
				}
				select {
				case <-serve:
					go serveHello(st)
				default:
					st.Reset("device service unreachable: connection refused")
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := newRecordLog()
			f := newFixture(t, testProfile(prof), func(c *Config) { c.Logger = slog.New(logs) })
			conn, chans, reqs := f.dial(t)
			go ssh.DiscardRequests(reqs)
			serve := make(chan struct{})
			go tc.refuse(conn, chans, serve)
			if strings.Contains(tc.name, "multiplexed") {
				logs.wait(t, "multiplexed channel open")
			}
			sock := f.forwardHTTP(t, conn, "dev1")

			const tries = 3*maxChannelsForOpenTests + 1
			for i := range tries {
				if got := personGets(t, sock); got != "" {
					t.Fatalf("try %d: the person got %q from a device that refused", i, got)
				}
			}
			// A refused channel is logged and its slot given back before the person's
			// connection closes; a reset stream closes it first (pipe's abort), then
			// gives the slot back and logs: once logged, both are settled.
			logs.waitN(t, tries, "device refused forwarded connection", "event", "forward_refused", "device", "dev1")
			checkRefusals(t, f, logs, tries, "device refused forwarded connection", "dev1")
			close(serve)
			holdMaxChannels(t, sock)
		})
	}
}

// checkRefusals checks that each of tries refused connections of device was logged
// once as msg, that no channel slot leaked, and that the hub's budget is back to zero.
func checkRefusals(t *testing.T, f *fixture, logs *recordLog, tries int, msg, device string) {
	t.Helper()
	if n := logs.count(msg, "event", "forward_refused", "device", device); n != tries {
		t.Errorf("%d refusals logged for %d refused connections", n, tries)
	}
	if n := logs.count("channel limit reached; refusing local connection"); n != 0 {
		t.Errorf("channel slots leaked: the limit was hit %d times", n)
	}
	if n := f.srv.budget.open.Load(); n != 0 {
		t.Errorf("%d forwarded connections still counted in the hub's budget", n)
	}
}

// holdMaxChannels opens max_channels connections at once and reads each one's answer
// only once all are open: every slot was free.
func holdMaxChannels(t *testing.T, sock string) {
	t.Helper()
	var conns []net.Conn
	for range maxChannelsForOpenTests {
		c, err := net.Dial("tcp", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i, c := range conns {
		if b, _ := io.ReadAll(c); string(b) != "hello" {
			t.Fatalf("connection %d of %d at once got %q: its channel slot was not free", i+1, maxChannelsForOpenTests, b)
		}
	}
}

// The session ends while the hub's open of the device's end is in flight (the agent
// was killed mid-open): the person's connection closes, nothing is held, and the hub
// serves the device's next session.
func TestSessionEndingDuringOpenIsRefusedCleanly(t *testing.T) {
	logs := newRecordLog()
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\nmax_channels: 3\n"), func(c *Config) { c.Logger = slog.New(logs) })
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	sock := f.forwardHTTP(t, conn, "dev1")
	go func() {
		// The open arrives, and the device dies before it answers.
		if _, ok := <-chans; ok {
			conn.Close()
		}
	}()
	if got := personGets(t, sock); got != "" {
		t.Fatalf("the person got %q", got)
	}
	if n := logs.count("device refused forwarded connection", "device", "dev1"); n != 1 {
		t.Errorf("%d refusals logged, want 1", n)
	}
	if n := f.srv.budget.open.Load(); n != 0 {
		t.Errorf("%d forwarded connections still counted in the hub's budget", n)
	}
	logs.wait(t, "session closed", "device", "dev1")

	conn2, chans2, reqs2 := f.dial(t)
	go ssh.DiscardRequests(reqs2)
	go acceptHello(chans2)
	holdMaxChannels(t, f.forwardHTTP(t, conn2, "dev1"))
}

func acceptHello(chans <-chan ssh.NewChannel) {
	for nc := range chans {
		ch, reqs, err := nc.Accept()
		if err == nil {
			go ssh.DiscardRequests(reqs)
			go serveHello(ch)
		}
	}
}

// A device behind a gateway: the gateway refuses the device channel, or its session
// ends while the open is in flight. Each connection is refused, logged once, its slot
// given back, and the centre serves the device through its gateway again afterwards.
func TestGatewayFailingToOpenIsRefusedCleanly(t *testing.T) {
	for _, dies := range []bool{false, true} {
		name := "the gateway refuses"
		if dies {
			name = "the gateway's session ends mid-open"
		}
		t.Run(name, func(t *testing.T) {
			logs := newRecordLog()
			f := newFixture(t, testProfile(gatewayProfile), func(c *Config) { c.Logger = slog.New(logs) })
			if err := f.reg.PutProfile(context.Background(), testProfile("name: default\nreverse: {http: 0}\nmax_channels: 3\n")); err != nil {
				t.Fatal(err)
			}
			conn, chans, reqs := f.dial(t)
			go ssh.DiscardRequests(reqs)
			if rs := announce(t, conn, sshext.Announce{Device: "cam-1", Aliases: []string{"http"}}); rs[0].Refused != "" {
				t.Fatalf("announce: %+v", rs)
			}
			sock := f.socketOf(t, "cam-1")
			go func() {
				for nc := range chans {
					if dies {
						conn.Close()
						continue
					}
					nc.Reject(ssh.ConnectionFailed, "gateway: cam-1's service is down")
				}
			}()
			tries := 3*maxChannelsForOpenTests + 1
			if dies {
				tries = 1
			}
			for i := range tries {
				if got := personGets(t, sock); got != "" {
					t.Fatalf("try %d: the person got %q", i, got)
				}
			}
			checkRefusals(t, f, logs, tries, "gateway refused the connection to its device", "cam-1")

			// The gateway connects again (a refusing one is made to, as a test cannot
			// change its mind), and the device is served through it with every slot.
			conn.Close()
			logs.wait(t, "session closed", "device", "dev1")
			conn, chans, reqs = f.dial(t)
			go ssh.DiscardRequests(reqs)
			if rs := announce(t, conn, sshext.Announce{Device: "cam-1", Aliases: []string{"http"}}); rs[0].Refused != "" {
				t.Fatalf("announce again: %+v", rs)
			}
			go acceptHello(chans)
			holdMaxChannels(t, f.socketOf(t, "cam-1"))
		})
	}
}
