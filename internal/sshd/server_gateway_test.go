package sshd

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

const gatewayProfile = "name: gw\ngateway: {max_devices: 1000000, devices: ['cam-*']}\n"

func announce(t testing.TB, conn ssh.Conn, as ...sshext.Announce) []sshext.AnnounceReply {
	t.Helper()
	ok, body, err := conn.SendRequest(sshext.AnnounceRequest, true, sshext.MarshalAnnounces(as))
	if err != nil || !ok {
		t.Fatalf("announce: %v %v", ok, err)
	}
	rs, err := sshext.ParseAnnounceReplies(body)
	if err != nil || len(rs) != len(as) {
		t.Fatalf("replies: %+v %v", rs, err)
	}
	return rs
}

// A gateway (dev1 here) announces a batch; each device is answered on its own, the
// admitted one is online with its own protected socket, and a connection to that
// socket arrives on the gateway's session as a device channel naming it.
func TestGatewayAnnouncementsBecomeDevices(t *testing.T) {
	f := newFixture(t, testProfile(gatewayProfile), nil)
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	rs := announce(t, conn,
		sshext.Announce{Device: "cam-1", Aliases: []string{"http"}, Key: "SHA256:k", Client: "SSH-2.0-x"},
		sshext.Announce{Device: "door-1", Aliases: []string{"http"}},
		sshext.Announce{Device: "cam-2", Aliases: []string{"http", "telnet"}})
	if rs[0].Refused != "" || len(rs[0].Served) != 1 || !strings.Contains(rs[1].Refused, "not among the names") ||
		len(rs[2].Served) != 1 || !strings.Contains(rs[2].Why, "telnet") {
		t.Fatalf("replies: %+v", rs)
	}
	if !f.srv.Online("cam-1") || f.srv.Online("door-1") {
		t.Fatal("online state wrong")
	}
	d, err := f.reg.Device(context.Background(), "cam-1")
	if err != nil || d.Via != "dev1" || len(d.Sockets) != 1 {
		t.Fatalf("cam-1 at the centre: %+v %v", d, err)
	}
	go func() {
		for nc := range chans {
			var o sshext.DeviceOpen
			if nc.ChannelType() != sshext.DeviceChannel || ssh.Unmarshal(nc.ExtraData(), &o) != nil || o.Device != "cam-1" || o.Alias != "http" {
				nc.Reject(ssh.Prohibited, "unexpected")
				continue
			}
			ch, creqs, _ := nc.Accept()
			go ssh.DiscardRequests(creqs)
			io.WriteString(ch, "hello from cam-1")
			ch.Close()
		}
	}()
	c, err := net.Dial("tcp", d.Sockets[0].Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hello from cam-1" {
		t.Fatalf("through the socket: %q", b)
	}
	// Violations of the gateway: the name outside its patterns and the alias telnet.
	if g, _ := f.reg.Device(context.Background(), "dev1"); g.Violations != 2 {
		t.Fatalf("gateway violations %d, want 2", g.Violations)
	}
	conn.SendRequest(sshext.WithdrawRequest, true, ssh.Marshal(sshext.Withdraw{Device: "cam-1"}))
	if f.srv.Online("cam-1") {
		t.Fatal("cam-1 still online after its withdrawal")
	}
}

// Only a gateway's profile may announce: any other session's announcement is a
// refused request and a violation.
func TestAnnouncementFromAPlainDeviceIsRefused(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), nil)
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	ok, _, err := conn.SendRequest(sshext.AnnounceRequest, true, sshext.MarshalAnnounces([]sshext.Announce{{Device: "cam-1"}}))
	if err != nil || ok {
		t.Fatalf("announcement accepted: %v %v", ok, err)
	}
	if d, _ := f.reg.Device(context.Background(), "dev1"); d.Violations != 1 {
		t.Fatalf("violations %d", d.Violations)
	}
	if _, err := f.reg.Device(context.Background(), "cam-1"); err == nil {
		t.Fatal("a plain device enrolled another")
	}
}

// BenchmarkGatewayChildren announces b.N devices behind one gateway (shared listeners,
// as a centre runs) and reports the centre's live heap per device and the time per
// announced device. Run: go test ./internal/sshd -bench GatewayChildren -benchtime 20000x
func BenchmarkGatewayChildren(b *testing.B) {
	f := newFixture(b, testProfile(gatewayProfile), func(c *Config) { c.Shared = sockets.NewShared(nil) })
	conn, _, reqs := f.dial(b)
	go ssh.DiscardRequests(reqs)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	announceN(b, conn, b.N)
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(b.N), "heap-B/device")
}

// BenchmarkGatewayReannounce is a centre restart's work: b.N devices known to the
// registry announced again by their gateway's new session.
func BenchmarkGatewayReannounce(b *testing.B) {
	f := newFixture(b, testProfile(gatewayProfile), func(c *Config) { c.Shared = sockets.NewShared(nil) })
	first, _, reqs := f.dial(b)
	go ssh.DiscardRequests(reqs)
	announceN(b, first, b.N)
	first.Close()
	first.Wait()
	conn, _, reqs := f.dial(b)
	go ssh.DiscardRequests(reqs)
	b.ResetTimer()
	announceN(b, conn, b.N)
}

// announceN announces devices cam-0..cam-N-1, in batches as a gateway does.
func announceN(b *testing.B, conn ssh.Conn, n int) {
	for start := 0; start < n; start += sshext.MaxAnnounceBatch {
		var as []sshext.Announce
		for i := start; i < min(n, start+sshext.MaxAnnounceBatch); i++ {
			as = append(as, sshext.Announce{Device: fmt.Sprintf("cam-%d", i), Aliases: []string{"http"}, Key: "SHA256:k", Client: "SSH-2.0-x", Remote: "10.0.0.1:1"})
		}
		for _, r := range announce(b, conn, as...) {
			if r.Refused != "" {
				b.Fatal(r.Refused)
			}
		}
	}
}

// The end of a session behind a gateway is written after the session, in the
// background; a hub stopped right then must still have written it before Close
// returns (the hub closes the registry next: the writes failed with "unable to open
// database file" when every gateway left just before a stop).
func TestChildSessionEndsAreRecordedBeforeClose(t *testing.T) {
	f := newFixture(t, testProfile(gatewayProfile), nil)
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	const n = 200 // one background write each: many still running when Close starts
	var as []sshext.Announce
	for i := range n {
		as = append(as, sshext.Announce{Device: fmt.Sprintf("cam-%d", i), Aliases: []string{"http"}})
	}
	for b := range slices.Chunk(as, sshext.MaxAnnounceBatch) {
		for _, r := range announce(t, conn, b...) {
			if r.Refused != "" {
				t.Fatalf("announce: %+v", r)
			}
		}
	}
	for i := range n {
		// Requests are served in order: the last reply comes after every withdrawal.
		if _, _, err := conn.SendRequest(sshext.WithdrawRequest, i == n-1, ssh.Marshal(sshext.Withdraw{Device: fmt.Sprintf("cam-%d", i)})); err != nil {
			t.Fatal(err)
		}
	}
	f.srv.Close()
	ev, err := f.reg.Events(context.Background(), registry.EventFilter{Kind: registry.EventSessionClose, Limit: 10 * n})
	if err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, e := range ev {
		if strings.HasPrefix(e.Device, "cam-") {
			ended++
		}
	}
	if ended != n {
		t.Fatalf("%d of %d sessions behind the gateway recorded as ended when Close returned", ended, n)
	}
}

// A profile applied to live sessions reaches devices behind a gateway: the centre
// closes the device under the old version and asks its gateway (without revoking it)
// to announce it again, so it comes back under the new one.
func TestKickProfileAsksTheGatewayToAnnounceAgain(t *testing.T) {
	f := newFixture(t, testProfile(gatewayProfile), nil)
	conn, _, reqs := f.dial(t)
	if rs := announce(t, conn, sshext.Announce{Device: "cam-1", Aliases: []string{"http"}}); rs[0].Refused != "" {
		t.Fatalf("announce: %+v", rs)
	}
	tightened := testProfile("name: default\nreverse: {http: 0}\nmax_channels: 2\n")
	if err := f.reg.PutProfile(context.Background(), tightened); err != nil {
		t.Fatal(err)
	}
	if n := f.srv.KickProfile("default", "profile default changed"); n != 1 {
		t.Fatalf("closed %d sessions, want cam-1's", n)
	}
	if f.srv.Online("cam-1") {
		t.Fatal("cam-1 still online under the old version")
	}
	told := false
	for !told {
		select {
		case req, ok := <-reqs:
			if !ok {
				t.Fatal("the gateway's session ended before it was told")
			}
			var c sshext.CloseDevice
			if req.Type != sshext.CloseDeviceRequest || ssh.Unmarshal(req.Payload, &c) != nil {
				if req.WantReply {
					req.Reply(false, nil)
				}
				continue
			}
			if c.Device != "cam-1" || c.Revoked || c.Reason != "profile default changed" {
				t.Fatalf("the gateway was told %+v", c)
			}
			told = true
		case <-time.After(30 * time.Second): // a guard, not a measurement
			t.Fatal("the gateway was never asked to announce cam-1 again")
		}
	}
	if d, err := f.reg.Device(context.Background(), "cam-1"); err != nil || d.Revoked() {
		t.Fatalf("cam-1 after the profile change: %+v %v", d, err)
	}
}

// blockingSink is a telemetry store that holds a relay mark request until released. A
// real store cannot be held mid-request on demand, which is why the test uses this.
type blockingSink struct {
	entered, release chan struct{}
}

func (b *blockingSink) RelayMark(ctx context.Context, source string) (uint64, error) {
	b.entered <- struct{}{}
	<-b.release
	return 7, nil
}

func (b *blockingSink) StoreRelayed(ctx context.Context, source string, upto uint64, items []sshext.RelayedNotification) (sshext.TelemetryAck, error) {
	return sshext.TelemetryAck{}, nil
}

// A gateway's requests write the stores; while one waits, the channel opens of the
// devices behind the gateway are still answered, and the request's answer comes in order.
func TestGatewayChannelsDoNotWaitForItsRequests(t *testing.T) {
	sink := &blockingSink{entered: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, testProfile(gatewayProfile), func(c *Config) { c.Telemetry = sink })
	var once sync.Once
	release := func() { once.Do(func() { close(sink.release) }) }
	t.Cleanup(release) // registered after the fixture's: runs first, so its Close can finish
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	type reply struct {
		ok   bool
		body []byte
	}
	got := make(chan reply, 1)
	go func() {
		ok, body, _ := conn.SendRequest(sshext.TelemetryMarkRequest, true, ssh.Marshal(sshext.TelemetryMark{Source: "telemetry"}))
		got <- reply{ok, body}
	}()
	<-sink.entered
	// The store is held: a channel open is answered all the same (a session channel is
	// refused: a gateway gets no shell). The minute is a guard against a hang.
	opened := make(chan error, 1)
	go func() {
		_, _, err := conn.OpenChannel("session", nil)
		opened <- err
	}()
	select {
	case err := <-opened:
		if err == nil || !strings.Contains(err.Error(), "administratively prohibited") {
			t.Fatalf("a channel open while the gateway's request waits: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a channel open waited for the gateway's request")
	}
	release()
	r := <-got
	var m sshext.TelemetryMarkReply
	if !r.ok || ssh.Unmarshal(r.body, &m) != nil || m.Upto != 7 {
		t.Fatalf("the mark request's answer: %+v", r)
	}
}

// What a gateway says of its devices' sessions reaches the registry and operators'
// terminals: a record with a control character or an oversized field is refused, counted
// against the gateway, and stores nothing (issue 48, item 10).
func TestMalformedAnnouncementIsRefused(t *testing.T) {
	f := newFixture(t, testProfile(gatewayProfile), nil)
	conn, _, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	rs := announce(t, conn,
		sshext.Announce{Device: "cam-1", Aliases: []string{"http"}, Client: "SSH-2.0-x\nsocket\tforged line"},
		sshext.Announce{Device: "cam-2", Aliases: []string{"http"}, Key: strings.Repeat("k", 4096)},
		sshext.Announce{Device: "cam-3", Aliases: []string{"http"}, Remote: "10.0.0.9:22\x1b[2J"})
	for i, r := range rs {
		if !strings.Contains(r.Refused, "malformed announcement") {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	for _, name := range []string{"cam-1", "cam-2", "cam-3"} {
		if _, err := f.reg.Device(context.Background(), name); err == nil {
			t.Errorf("%s was recorded from a malformed announcement", name)
		}
	}
	if g, _ := f.reg.Device(context.Background(), "dev1"); g.Violations != 3 {
		t.Fatalf("gateway violations %d, want 3", g.Violations)
	}
}
