package mqttbridge_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
)

// local records what comes in over the bridge: the site broker's side of the interface
// (the hub's broker is tested with the bridge in test/e2e).
type local struct{ got chan string }

func (l local) Publish(topic string, payload []byte, retain bool, qos byte) error {
	l.got <- fmt.Sprintf("%s %s q%d", topic, payload, qos)
	return nil
}

// waitFor polls cond (a state the test cannot be told of) until it holds.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 100*time.Millisecond) {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(delay):
		}
	}
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: run scripts/setup.sh", tool)
		}
	}
}

type central struct {
	*lab.Mosquitto
	cert, dir string
}

// startCentral runs Debian's Mosquitto as the central broker: TLS with a lab
// certificate, passwords for the site's bridge and for a reader.
func startCentral(t *testing.T, ctx context.Context) central {
	t.Helper()
	dir := t.TempDir()
	cert, key, _, err := lab.WriteCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := lab.StartMosquitto(ctx, filepath.Join(dir, "mosquitto"), lab.MosquittoOpts{CertFile: cert, KeyFile: key,
		Users: map[string]string{"site1": "site-secret", "reader": "reader-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return central{m, cert, dir}
}

func (c central) tool(args ...string) []string {
	host, port, _ := strings.Cut(c.Addr, ":")
	return append([]string{"-h", host, "-p", port, "--cafile", c.cert, "--insecure"}, args...)
}

// reader subscribes at the centre with a persistent session (it gets what arrived while
// it reconnected), printing "topic payload" lines.
// subscriber is mosquitto_sub with a persistent session at the centre.
type subscriber struct {
	p    *lab.Proc
	argv []string
}

func (c central) reader(t *testing.T, ctx context.Context, filter string) *subscriber {
	t.Helper()
	s := &subscriber{argv: append([]string{"stdbuf", "-oL", "mosquitto_sub"}, c.tool("-u", "reader", "-P", "reader-secret", "-i", "reader", "-c", "-q", "1", "-v", "-d", "-t", filter)...)}
	s.start(t)
	if _, err := s.p.ReadLine(ctx, "Client reader received SUBACK"); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *subscriber) start(t *testing.T) {
	t.Helper()
	p, err := lab.StartProc("mosquitto_sub", nil, s.argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	s.p = p
}

func bridgeConfig(t *testing.T, c central) mqttbridge.Config {
	pw := filepath.Join(c.dir, "bridge.pw")
	if err := os.WriteFile(pw, []byte("site-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mqttbridge.Config{Address: c.Addr, CA: c.cert, ServerName: "lab", Username: "site1", PasswordFile: pw, ClientID: "site1-bridge",
		Keepalive: 5 * time.Second,
		Topics: []mqttbridge.Rule{
			{Pattern: "devices/#", Remote: "site1/"},
			{Pattern: "commands/#", Direction: mqttbridge.In, Local: "devices/dev1/", Remote: "site1/"},
		}}
	cfg.ApplyDefaults("test")
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func forward(t *testing.T, b *mqttbridge.Bridge, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := b.Forward(context.Background(), "devices/dev1/notifications/n", []byte(fmt.Sprint(i)), 1, false); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// readAll reads the reader's messages until it has every one of from..to-1, and returns
// how many came twice; messages must come in order (a repeat may go back).
//
// mosquitto_sub now and then exits when the centre stops under it ("Protocol error"):
// it is started again on its persistent session, which delivers what the centre kept
// for it (before any SUBACK, so the lines are read as they come).
func readAll(t *testing.T, ctx context.Context, sub *subscriber, from, to int) (dups int) {
	t.Helper()
	seen := make([]bool, to)
	missing, last := to-from, -1
	restarts := 0
	for missing > 0 {
		l, err := sub.p.ReadLine(ctx, "site1/devices/dev1/notifications/n ")
		if err != nil && ctx.Err() == nil && restarts < 50 {
			restarts++
			sub.p.Stop()
			select { // the centre may still be starting: try again shortly
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			sub.start(t)
			continue
		}
		if err != nil {
			t.Fatalf("%d of %d messages arrived: %v", to-from-missing, to-from, err)
		}
		var i int
		if _, err := fmt.Sscan(l, &i); err != nil || i < 0 || i >= to {
			t.Fatalf("unexpected message %q", l)
		}
		if seen[i] || i < from {
			dups++
			continue
		}
		if i < last {
			t.Fatalf("message %d arrived after %d", i, last)
		}
		seen[i], last = true, i
		missing--
	}
	return dups
}

// The bridge against a real Mosquitto: messages go out in order; while the centre is
// down they wait on disk, across a restart of the bridge itself, and arrive once it is
// back; what the centre publishes on the site's command topics comes in.
func TestBridgeStoreAndForward(t *testing.T) {
	need(t, "mosquitto", "mosquitto_sub", "mosquitto_pub", "mosquitto_passwd", "stdbuf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCentral(t, ctx)
	rd := c.reader(t, ctx, "site1/devices/#")
	cfg := bridgeConfig(t, c)
	queue := filepath.Join(t.TempDir(), mqttbridge.QueueFile)
	in := local{got: make(chan string, 16)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := mqttbridge.New(cfg, queue, in, log)
	if err != nil {
		t.Fatal(err)
	}
	// Queued before the first connection.
	forward(t, b, 0, 100)
	b.Start()
	forward(t, b, 100, 200)
	dups := readAll(t, ctx, rd, 0, 200)

	// The centre stops: messages wait, then the bridge itself restarts with them queued.
	c.Stop()
	forward(t, b, 200, 400)
	if st := b.Status(); st.Queued == 0 {
		t.Fatalf("nothing queued while the centre is down: %+v", st)
	}
	b.Close()
	b, err = mqttbridge.New(cfg, queue, in, log)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if st := b.Status(); st.Queued != 200 {
		t.Fatalf("after the bridge's restart %d messages wait, want 200", st.Queued)
	}
	b.Start()
	forward(t, b, 400, 450)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dups += readAll(t, ctx, rd, 200, 450)
	t.Logf("450 messages, %d duplicates", dups)

	// In: the centre's command for the site arrives at the site broker, mapped.
	waitFor(t, ctx, "the bridge's subscription", func() bool { return b.Status().Subscribed })
	if out, err := exec.CommandContext(ctx, "mosquitto_pub", c.tool("-u", "reader", "-P", "reader-secret", "-q", "1", "-t", "site1/commands/reboot", "-m", "now")...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	select {
	case got := <-in.got:
		if got != "devices/dev1/commands/reboot now q1" {
			t.Fatalf("came in: %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the centre's command did not come in")
	}
	st := b.Status()
	if st.State != mqttbridge.StateConnected || st.Queued != 0 || st.Received < 1 {
		t.Fatalf("status: %+v", st)
	}
}

// Messages forwarded while the centre stops and starts twice all arrive, in order.
func TestBridgeCentreRestarts(t *testing.T) {
	need(t, "mosquitto", "mosquitto_sub", "mosquitto_passwd", "stdbuf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCentral(t, ctx)
	rd := c.reader(t, ctx, "site1/devices/#")
	b, err := mqttbridge.New(bridgeConfig(t, c), filepath.Join(t.TempDir(), mqttbridge.QueueFile), local{got: make(chan string, 16)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Start()
	const n = 3000
	sent := make(chan error, 1)
	progress := make(chan int, n)
	go func() {
		for i := range n {
			if err := b.Forward(context.Background(), "devices/dev1/notifications/n", []byte(fmt.Sprint(i)), 1, false); err != nil {
				sent <- err
				return
			}
			progress <- i
		}
		sent <- nil
	}()
	for k, at := range []int{n / 3, 2 * n / 3} {
		for i := range progress {
			if i >= at {
				break
			}
		}
		c.Stop() // SIGTERM: Mosquitto saves what it acknowledged (a SIGKILL loses its last second)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// The bridge must be back before the next stop, or both outages are one to it.
		waitFor(t, ctx, "the bridge back", func() bool {
			st := b.Status()
			return st.State == mqttbridge.StateConnected && st.Reconnects > int64(k)
		})
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	dups := readAll(t, ctx, rd, 0, n)
	st := b.Status()
	t.Logf("%d messages through two restarts of the centre: %d duplicates; status %+v", n, dups, st)
	if st.Reconnects < 2 {
		t.Errorf("the bridge reconnected %d times, want 2 or more", st.Reconnects)
	}
}

// A wrong password or a centre whose certificate the pinned CA did not sign: the bridge
// stays down, says why in its status, and keeps what was forwarded.
func TestBridgeRefusals(t *testing.T) {
	need(t, "mosquitto", "mosquitto_passwd", "stdbuf")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startCentral(t, ctx)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, mod := range map[string]func(*mqttbridge.Config){
		// Mosquitto answers a wrong password with "not authorized" (0x87).
		"the central broker refused the bridge": func(cfg *mqttbridge.Config) {
			os.WriteFile(cfg.PasswordFile, []byte("wrong\n"), 0o600)
		},
		"certificate signed by unknown authority": func(cfg *mqttbridge.Config) {
			other, _, _, err := lab.WriteCert(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cfg.CA = other
		},
	} {
		cfg := bridgeConfig(t, c)
		mod(&cfg)
		b, err := mqttbridge.New(cfg, filepath.Join(t.TempDir(), mqttbridge.QueueFile), local{got: make(chan string, 1)}, log)
		if err != nil {
			t.Fatal(err)
		}
		forward(t, b, 0, 3)
		b.Start()
		waitFor(t, ctx, name, func() bool { return strings.Contains(b.Status().LastError, name) })
		if st := b.Status(); st.State == mqttbridge.StateConnected || st.Queued != 3 {
			t.Errorf("%s: %+v", name, st)
		}
		b.Close()
	}
}
