package soap

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/deviceplain"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// fixture is the endpoint on a real registry, directory and telemetry store, served on
// loopback, with devices dev1 and dev2 holding SOAP keys. plain says whether it plays the
// plain listener (source addresses identify devices) or the front door.
type fixture struct {
	reg        *registry.Registry
	store      *telemetry.Store
	dir        *devicedir.Directory
	ep         *Endpoint
	serving    atomic.Pointer[Endpoint] // what the test server serves (a restart swaps it)
	url        string
	keys       map[string]wssec.Key
	addrs      map[string]netip.Addr
	mu         sync.Mutex
	violations []string
}

func newFixture(t *testing.T, cfg Config, plain bool) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	reg, err := registry.Open(ctx, dir, sockets.Config{CIDR: "127.83.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	f := &fixture{reg: reg, keys: map[string]wssec.Key{}, addrs: map[string]netip.Addr{}}
	for _, name := range []string{"dev1", "dev2"} {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		pub, _ := ssh.NewPublicKey(k.Public())
		d, err := reg.AddDevice(ctx, name, "default", pub)
		if err != nil {
			t.Fatal(err)
		}
		f.addrs[name] = d.Address
		key, _ := wssec.NewKey()
		if err := reg.SetSOAPKey(ctx, registry.SOAPKey{Device: name, KeyID: key.ID, Secret: key.Secret}); err != nil {
			t.Fatal(err)
		}
		f.keys[name] = key
	}
	if f.store, err = telemetry.Open(ctx, dir, telemetry.Config{}, telemetry.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	f.dir = devicedir.New(reg)
	if err := f.dir.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if f.ep, err = New(cfg, f.dir, f.store, reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	f.ep.Violation = func(device, detail, remote string) {
		f.mu.Lock()
		f.violations = append(f.violations, device+": "+detail)
		f.mu.Unlock()
	}
	f.serving.Store(f.ep)
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serving.Load().ServeHTTP(w, r) })
	if !plain {
		srv := httptest.NewServer(serve)
		t.Cleanup(srv.Close)
		f.url = srv.URL + Path
		return f
	}
	// The hub's own plain device listener: these clients connect from their device's pool
	// address as the hub's forwards do, in this process (the hub's uid), so it knows them.
	pl, err := deviceplain.Listen("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	pl.Mount(Path, serve)
	go pl.Serve()
	t.Cleanup(pl.Close)
	f.url = "http://" + pl.Addr().String() + Path
	return f
}

// client is dev's client, connecting from dev's pool address (as its SSH forwards do).
func (f *fixture) client(dev string, format wssec.Format, suite string) *Client {
	s, _ := wssec.SuiteByName(suite)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: f.addrs[dev].AsSlice()}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	return NewClient(f.url, hc, f.keys[dev], s, format)
}

func (f *fixture) violationCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.violations)
}

func payload() []byte {
	return Notification("temperature", "", [][2]string{{"value", "21.5"}, {"unit", "C"}})
}

// A device's message in either format is verified, decrypted, stored as its notification
// (what REST and MQTT readers read) and answered with a sealed acknowledgement.
func TestNotificationsAreStoredAndAnswered(t *testing.T) {
	f := newFixture(t, Config{Enabled: true}, true)
	ctx := context.Background()
	for _, format := range []wssec.Format{wssec.CSec, wssec.SecRec} {
		for _, suite := range []string{"aes128-gcm", "chacha20-poly1305"} {
			x, err := f.client("dev1", format, suite).Notify(ctx, payload())
			if err != nil {
				t.Fatalf("%s %s: %v", format, suite, err)
			}
			n, err := f.store.Get(ctx, "dev1", x.ID)
			if err != nil || n.Name != "temperature" || string(n.Parameters) != `{"unit":"C","value":"21.5"}` || n.DeviceTime == nil {
				t.Fatalf("%s %s: stored %+v %v", format, suite, n, err)
			}
		}
	}
	// Text payloads are stored as {"value": ...}.
	x, err := f.client("dev2", wssec.SecRec, "aes256-gcm").Notify(ctx, Notification("status", "ok & running", nil))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := f.store.Get(ctx, "dev2", x.ID); string(n.Parameters) != `{"value":"ok \u0026 running"}` {
		t.Fatalf("text payload stored as %s", n.Parameters)
	}
	if f.violationCount() != 0 {
		t.Fatalf("violations on good messages: %v", f.violations)
	}
}

func faultOf(t *testing.T, err error) *Fault {
	t.Helper()
	var fault *Fault
	if !errors.As(err, &fault) {
		t.Fatalf("want a SOAP fault, got %v", err)
	}
	return fault
}

// Every refusal is a fault with the WS-Security code a client can act on and an audit
// event; nothing is stored. On the SSH path a message the device could not have sealed
// right is a violation of the sending device; a copy of a good message (a replay, one
// too old, one addressed elsewhere) is not: it proves only that someone once held the key.
func TestRefusalsAreFaultsAuditedAndCounted(t *testing.T) {
	f := newFixture(t, Config{Enabled: true}, true)
	ctx := context.Background()
	c := f.client("dev1", wssec.CSec, "aes128-gcm")
	good := wssec.Message{To: f.url, Action: ActionNotify, MessageID: wssec.NewMessageID(), Created: time.Now(), Body: payload()}
	sealed, _ := wssec.Seal(wssec.CSec, good, c.Suite, c.Key)
	if _, err := c.Post(ctx, good.MessageID, sealed); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, subcode string
		violation     bool
		send          func() error
	}{
		{"replay", "wsse:InvalidSecurity", false, func() error { _, err := c.Post(ctx, good.MessageID, sealed); return err }},
		{"addressed elsewhere", "wsa:DestinationUnreachable", false, func() error {
			elsewhere := good
			elsewhere.MessageID, elsewhere.To = wssec.NewMessageID(), "https://evil.example/soap"
			b, _ := wssec.Seal(wssec.CSec, elsewhere, c.Suite, c.Key)
			_, err := c.Post(ctx, elsewhere.MessageID, b)
			return err
		}},
		{"bad signature", "wsse:FailedCheck", true, func() error {
			bad := strings.Replace(string(sealed), "Notify<", "Notifx<", 1)
			_, err := c.Post(ctx, good.MessageID, []byte(bad))
			return err
		}},
		{"unknown key", "wsse:SecurityTokenUnavailable", true, func() error {
			other := NewClient(f.url, c.HTTP, wssec.Key{ID: "knobody", Secret: make([]byte, wssec.KeySize)}, c.Suite, wssec.CSec)
			_, err := other.Notify(ctx, payload())
			return err
		}},
		{"legacy algorithm", "wsse:UnsupportedAlgorithm", true, func() error {
			_, err := f.client("dev1", wssec.SecRec, "aes128-cbc-sha1").Notify(ctx, payload())
			return err
		}},
		{"expired", "wsu:MessageExpired", false, func() error {
			old := good
			old.MessageID, old.Created = wssec.NewMessageID(), time.Now().Add(-time.Hour)
			b, _ := wssec.Seal(wssec.CSec, old, c.Suite, c.Key)
			_, err := c.Post(ctx, old.MessageID, b)
			return err
		}},
		{"entity expansion", "wsse:InvalidSecurity", true, func() error {
			_, err := c.Post(ctx, "x", []byte(`<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><l>&b;</l>`))
			return err
		}},
		{"another device's key", "wsse:SecurityTokenUnavailable", true, func() error {
			stolen := NewClient(f.url, c.HTTP, f.keys["dev2"], c.Suite, wssec.CSec)
			_, err := stolen.Notify(ctx, payload())
			return err
		}},
	}
	want := 0
	for _, tc := range cases {
		fault := faultOf(t, tc.send())
		if fault.Subcode != tc.subcode || fault.Status != http.StatusBadRequest || fault.Reason == "" {
			t.Errorf("%s: %+v", tc.name, fault)
		}
		if tc.violation {
			want++
		}
		if got := f.violationCount(); got != want {
			t.Errorf("%s: %d violations, want %d (%v)", tc.name, got, want, f.violations)
		}
	}
	if ns, _ := f.store.List(ctx, telemetry.Filter{Devices: []string{"dev1", "dev2"}}); len(ns) != 1 {
		t.Fatalf("%d notifications stored, want the one good one", len(ns))
	}
	// The audit log gets one event a minute per sender and fault code (the rest are
	// counted in the next one): six codes here.
	events, err := f.reg.Events(ctx, registry.EventFilter{Kind: EventRefused})
	if err != nil || len(events) != 6 || events[0].Device != "dev1" {
		t.Fatalf("audit events %+v (%v), want one per fault code", events, err)
	}
	// A malformed payload inside a good message: a clear fault, nothing stored.
	_, err = c.Notify(ctx, []byte(`<n:Reading xmlns:n="`+NS+`"/>`))
	if fault := faultOf(t, err); !strings.Contains(fault.Reason, "Notification") {
		t.Fatalf("wrong payload: %+v", fault)
	}
}

// A revoked device's key stops at once (at the directory's next reload, which the hub
// does on every change); on the front door, failures of unproven senders are audited but
// count against no device.
func TestRevokedDeviceAndFrontDoorAttribution(t *testing.T) {
	f := newFixture(t, Config{Enabled: true}, false)
	ctx := context.Background()
	c := f.client("dev1", wssec.SecRec, "aes128-gcm")
	if _, err := c.Notify(ctx, payload()); err != nil {
		t.Fatal(err)
	}
	bad := NewClient(f.url, c.HTTP, wssec.Key{ID: f.keys["dev1"].ID, Secret: make([]byte, wssec.KeySize)}, c.Suite, wssec.SecRec)
	if fault := faultOf(t, func() error { _, err := bad.Notify(ctx, payload()); return err }()); fault.Subcode != "wsse:FailedCheck" {
		t.Fatalf("forged: %+v", fault)
	}
	if n := f.violationCount(); n != 0 {
		t.Fatalf("a stranger's forgery on the front door counted against dev1: %v", f.violations)
	}
	if err := f.reg.RevokeDevice(ctx, "dev1", "lost"); err != nil {
		t.Fatal(err)
	}
	f.dir.Reload(ctx)
	_, err := c.Notify(ctx, payload())
	if fault := faultOf(t, err); fault.Subcode != "wsse:FailedAuthentication" || !strings.Contains(fault.Reason, "revoked") {
		t.Fatalf("revoked: %+v", fault)
	}
}

// Limits: an oversized message and a GET are refused with a fault.
func TestLimits(t *testing.T) {
	f := newFixture(t, Config{Enabled: true, MaxBody: 4096}, false)
	c := f.client("dev1", wssec.CSec, "aes128-gcm")
	_, err := c.Notify(context.Background(), Notification("big", strings.Repeat("x", 5000), nil))
	if fault := faultOf(t, err); fault.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized: %+v", fault)
	}
	resp, err := http.Get(f.url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	// What is not SOAP is refused as such (issue 55.8), with a fault that says what to
	// send; SOAP 1.1's text/xml goes on to the message checks.
	for ct, want := range map[string]int{"application/json": http.StatusUnsupportedMediaType, "application/x-www-form-urlencoded": http.StatusUnsupportedMediaType,
		"": http.StatusUnsupportedMediaType, "text/xml; charset=utf-8": http.StatusBadRequest, "application/soap+xml; charset=utf-8": http.StatusBadRequest} {
		req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader("<not-sealed/>"))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Content-Type %q: %d, want %d: %s", ct, resp.StatusCode, want, body)
		}
		if want == http.StatusUnsupportedMediaType && !strings.Contains(string(body), "is not SOAP: POST a SOAP 1.2 envelope as application/soap+xml") {
			t.Errorf("Content-Type %q: the fault does not say what to send: %s", ct, body)
		}
	}
}

// The config refuses RC4 outright and the legacy suite without the opt-in, and warns
// when it is opted in.
func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Algorithms: []string{"rc4-sha1"}, AllowLegacy: true}, {Algorithms: []string{"aes128-cbc-sha1"}}, {Window: -1}, {Window: 2 * time.Hour}} {
		if _, err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	weak, err := (&Config{Algorithms: []string{"aes128-gcm", "aes128-cbc-sha1"}, AllowLegacy: true}).Validate()
	if err != nil || len(weak) != 1 {
		t.Fatalf("legacy opted in: %v %v", weak, err)
	}
}

// One device's key cannot block another's (issue 48, item 3): a key that fills its own
// replay window waits (503, not a violation) while every other key goes on.
func TestReplayWindowIsPerKey(t *testing.T) {
	f := newFixture(t, Config{Enabled: true, MaxIDs: 3}, true)
	ctx := context.Background()
	hog := f.client("dev1", wssec.CSec, "aes128-gcm")
	for i := range 3 {
		if _, err := hog.Notify(ctx, payload()); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	_, err := hog.Notify(ctx, payload())
	if fault := faultOf(t, err); fault.Status != http.StatusServiceUnavailable || !strings.Contains(fault.Reason, "try again later") {
		t.Fatalf("a full window: %+v", fault)
	}
	if _, err := f.client("dev2", wssec.CSec, "aes128-gcm").Notify(ctx, payload()); err != nil {
		t.Fatalf("another device while dev1's window is full: %v", err)
	}
	if n := f.violationCount(); n != 0 {
		t.Fatalf("window pressure counted as a violation: %v", f.violations)
	}
}

// A captured message is not stored again after the hub restarts (issue 48, item 16:
// the store holds the ids), and replaying it charges its device nothing (item 15), on
// the SSH path and on the front door.
func TestReplayAfterRestartIsRefusedWithoutViolation(t *testing.T) {
	for _, plain := range []bool{true, false} {
		f := newFixture(t, Config{Enabled: true}, plain)
		ctx := context.Background()
		c := f.client("dev1", wssec.SecRec, "aes256-gcm")
		m := wssec.Message{To: f.url, Action: ActionNotify, MessageID: wssec.NewMessageID(), Created: time.Now(), Body: payload()}
		sealed, _ := wssec.Seal(wssec.SecRec, m, c.Suite, c.Key)
		if _, err := c.Post(ctx, m.MessageID, sealed); err != nil {
			t.Fatal(err)
		}
		// A restart: a new endpoint (empty memory) on the same store.
		ep, err := New(Config{Enabled: true}, f.dir, f.store, f.reg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ep.Violation = f.ep.Violation
		f.serving.Store(ep)
		for range 3 {
			_, err := c.Post(ctx, m.MessageID, sealed)
			if fault := faultOf(t, err); fault.Subcode != "wsse:InvalidSecurity" || !strings.Contains(fault.Reason, "already seen") {
				t.Fatalf("plain=%v: a replay after a restart: %+v", plain, fault)
			}
		}
		if ns, _ := f.store.List(ctx, telemetry.Filter{Devices: []string{"dev1"}}); len(ns) != 1 {
			t.Fatalf("plain=%v: stored %d times", plain, len(ns))
		}
		if n := f.violationCount(); n != 0 {
			t.Fatalf("plain=%v: replays counted against the device: %v", plain, f.violations)
		}
	}
}
