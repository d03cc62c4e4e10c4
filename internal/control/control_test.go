package control_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshtest"
)

// Every test runs on SQLite, then again on PostgreSQL (where the feed also wakes on
// LISTEN/NOTIFY).
func TestMain(m *testing.M) { pgscratch.Twice(m) }

func openRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(context.Background(), pgscratch.Location(t, t.TempDir()), sockets.Config{CIDR: "127.81.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// feedStart opens a registry and returns it with the event its change feed starts after.
func feedStart(t *testing.T) (*registry.Registry, int64) {
	t.Helper()
	reg := openRegistry(t)
	from, err := reg.LastChangeID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return reg, from
}

// follow runs c's change feed over reg from `from` on until the test ends.
func follow(t *testing.T, c *control.Control, reg *registry.Registry, from int64, poll time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Follow(ctx, reg, poll, from, slog.New(slog.DiscardHandler))
}

// recorder is a hub's live side: what the changes asked of it, each call also sent on
// calls so a test can wait for it. It is our own interface's test double (the hub's real
// one is exercised by the e2e tests, with OpenSSH sessions and MQTT clients).
type recorder struct {
	mu          sync.Mutex
	open        map[string]int // device -> sessions it has here
	calls       chan string
	reload      int
	failReloads int // the next reloads that fail (a policy that cannot be built yet)
}

func newRecorder() *recorder {
	return &recorder{open: map[string]int{}, calls: make(chan string, 100)}
}

func (r *recorder) Close(device, fp, why string) int {
	r.mu.Lock()
	n := r.open[device]
	delete(r.open, device)
	r.mu.Unlock()
	r.calls <- "close " + device + " " + fp + " " + why
	return n
}
func (r *recorder) Refresh() {}
func (r *recorder) Reload(upTo int64) error {
	r.mu.Lock()
	fail := r.failReloads > 0
	if fail {
		r.failReloads--
	} else {
		r.reload++
	}
	r.mu.Unlock()
	if fail {
		r.calls <- "reload failed"
		return errors.New("the policy cannot be built now")
	}
	r.calls <- "reload"
	return nil
}
func (r *recorder) Forget(device string)     { r.calls <- "forget " + device }
func (r *recorder) Moved(device, hub string) { r.calls <- "moved " + device + " " + hub }
func (r *recorder) CloseProfile(name, why string) int {
	r.calls <- "closeprofile " + name + " " + why
	return 0
}
func (r *recorder) CloseCA(fp, why string) int {
	r.calls <- "closeca " + fp + " " + why
	return 0
}

// await reads calls until want arrives; what came before it is returned.
func (r *recorder) await(t *testing.T, want string) []string {
	t.Helper()
	var seen []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case c := <-r.calls:
			if c == want {
				return seen
			}
			seen = append(seen, c)
		case <-timeout:
			t.Fatalf("%q never came; saw %q", want, seen)
		}
	}
}

func newKey(t *testing.T) (ssh.PublicKey, string) {
	k := sshtest.Signer(t).PublicKey()
	return k, string(ssh.MarshalAuthorizedKey(k))
}

func apply(t *testing.T, c *control.Control, ch control.Change) control.Outcome {
	t.Helper()
	out, err := c.Apply(context.Background(), ch)
	if err != nil {
		t.Fatalf("%s: %v", ch.Op(), err)
	}
	return out
}

// A change applied through the hub's path ends the device's sessions before Apply returns
// and says how many; the same change coming back through the feed finds nothing to close.
func TestApplyClosesAtOnce(t *testing.T) {
	reg := openRegistry(t)
	rec := newRecorder()
	hub := control.New(reg, rec)
	_, line := newKey(t)
	d := apply(t, hub, control.AddDevice{Name: "dev1", Profile: "default", Key: line}).Device
	if d == nil || d.Name != "dev1" || !d.Address.IsValid() {
		t.Fatalf("enrolled %+v", d)
	}
	rec.await(t, "reload") // a new device: its sockets reach the policy
	rec.open["dev1"] = 2
	out := apply(t, hub, control.RevokeDevice{Device: "dev1", Reason: "stolen"})
	if out.Closed != 2 {
		t.Fatalf("closed %d, want 2", out.Closed)
	}
	rec.await(t, "close dev1  key revoked")
	got, err := reg.Device(context.Background(), "dev1")
	if err != nil || !got.Revoked() || got.RevokeWhy != "stolen" {
		t.Fatalf("registry: %+v %v", got, err)
	}
	// The feed brings the same change back: nothing left to close, nothing reported.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Follow(ctx, reg, 10*time.Millisecond, 0, slog.New(slog.DiscardHandler))
	rec.await(t, "close dev1  key revoked")
	if n := rec.open["dev1"]; n != 0 {
		t.Fatalf("sessions left: %d", n)
	}
}

// What another process writes (the CLI with no hub answering, another hub of a shared
// registry) reaches this hub's live subsystems through the change feed.
func TestFollowAppliesChangesMadeElsewhere(t *testing.T) {
	reg, from := feedStart(t)
	rec := newRecorder()
	hub := control.New(reg, rec)
	follow(t, hub, reg, from, 20*time.Millisecond)

	elsewhere := control.New(reg, nil) // the offline mode: the registry write alone
	if elsewhere.Online() || !hub.Online() {
		t.Fatal("Online")
	}
	key, line := newKey(t)
	apply(t, elsewhere, control.AddDevice{Name: "dev1", Profile: "default", Key: line})
	rec.await(t, "reload")
	_, second := newKey(t)
	apply(t, elsewhere, control.AddKey{Device: "dev1", Key: second}) // a device keeps one key at least
	fp := ssh.FingerprintSHA256(key)
	apply(t, elsewhere, control.RevokeKey{Device: "dev1", Fingerprint: fp})
	rec.await(t, "close dev1 "+fp+" key revoked")
	apply(t, elsewhere, control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalUser, Name: "root", Target: "dev1", Alias: "http"}})
	rec.await(t, "reload")
	apply(t, elsewhere, control.RemoveDevice{Device: "dev1"})
	rec.await(t, "close dev1  device removed")
	rec.await(t, "forget dev1")
	rec.await(t, "reload") // its sockets leave the policy
}

// A change whose reload fails (the policy cannot be built: a full disk, a kernel
// refusing the rules) is tried again at the next poll, not only when another change
// comes: with no change after it, it would never apply.
func TestFailedReloadIsRetriedWithoutANewChange(t *testing.T) {
	reg, from := feedStart(t)
	rec := newRecorder()
	rec.failReloads = 2
	follow(t, control.New(reg, rec), reg, from, 10*time.Millisecond)
	_, line := newKey(t)
	apply(t, control.New(reg, nil), control.AddDevice{Name: "dev1", Profile: "default", Key: line})
	if seen := rec.await(t, "reload"); len(seen) != 2 || seen[0] != "reload failed" || seen[1] != "reload failed" {
		t.Fatalf("before the reload that worked: %q", seen)
	}
}

// A profile stored for new sessions asks nothing of live ones; applied now, it closes
// them here through Apply and on every other hub through the change feed.
func TestPutProfile(t *testing.T) {
	reg, from := feedStart(t)
	ctx := context.Background()
	rec := newRecorder()
	hub := control.New(reg, rec)
	spec := "name: cam\nreverse: {http: 0}\n"
	apply(t, hub, control.PutProfile{Spec: spec})
	if p, err := reg.Profile(ctx, "cam"); err != nil || p.Name != "cam" {
		t.Fatalf("stored: %+v %v", p, err)
	}
	apply(t, hub, control.PutProfile{Spec: spec, Restart: true})
	rec.await(t, "closeprofile cam profile cam changed")

	// Another hub of the registry learns it from the feed: only the applied one.
	other := newRecorder()
	follow(t, control.New(reg, other), reg, from, 10*time.Millisecond)
	if seen := other.await(t, "closeprofile cam profile cam changed"); len(seen) != 0 {
		t.Fatalf("before it: %q", seen)
	}
	for _, kind := range []string{registry.EventProfileStored, registry.EventProfileApplied} {
		if ev, _ := reg.Events(ctx, registry.EventFilter{Kind: kind}); len(ev) != 1 || ev[0].Detail != "cam" {
			t.Fatalf("%s events: %+v", kind, ev)
		}
	}
	if _, err := hub.Apply(ctx, control.PutProfile{Spec: "name: cam\nreverse: {http: 0}\nmax_channels: -1\n"}); err == nil {
		t.Fatal("an invalid profile was stored")
	}
}

// Refused changes leave the registry as it was and ask nothing of the live side.
func TestApplyRefusals(t *testing.T) {
	reg := openRegistry(t)
	rec := newRecorder()
	c := control.New(reg, rec)
	ctx := context.Background()
	for _, tc := range []struct {
		ch   control.Change
		want string
		is   error
	}{
		{control.RevokeDevice{}, "needs a device", control.ErrInvalid},
		{control.RevokeDevice{Device: "ghost"}, "", registry.ErrNotFound},
		{control.RemoveDevice{Device: "ghost"}, "", registry.ErrNotFound},
		{control.SetGroups{Device: "ghost", Groups: []string{"g"}}, "", registry.ErrNotFound},
		{control.SetDeviceSecret{Device: "ghost", Hash: "h"}, "enroll it first with 'iotsafe device add ghost'", registry.ErrNotFound},
		{control.SetSOAPKey{Device: "ghost", KeyID: "k"}, "needs a secret", control.ErrInvalid},
		{control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: "nobody", Target: "dev1", Alias: "*"}}, "no front-door account \"nobody\"", nil},
		{control.AddGrant{Grant: registry.Grant{Kind: "robot", Name: "x", Target: "dev1", Alias: "*"}}, "principal kind", control.ErrInvalid},
		{control.AddDevice{Name: "dev1", Profile: "default", Key: "not a key"}, "the key", control.ErrInvalid},
		{control.RevokeToken{Account: "a"}, "needs a token id", control.ErrInvalid},
	} {
		_, err := c.Apply(ctx, tc.ch)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s %+v: %v", tc.ch.Op(), tc.ch, err)
		}
	}
	if len(rec.calls) != 0 {
		t.Fatalf("refused changes reached the live side: %d calls", len(rec.calls))
	}
	if ds, err := reg.Devices(ctx); err != nil || len(ds) != 0 {
		t.Fatalf("devices after refusals: %v %v", ds, err)
	}
}

// Accounts, grants by account name and tokens: the account's id is resolved by the
// change path, and each change rebuilds the policy.
func TestAccountChanges(t *testing.T) {
	reg := openRegistry(t)
	rec := newRecorder()
	c := control.New(reg, rec)
	_, line := newKey(t)
	apply(t, c, control.AddDevice{Name: "dev1", Profile: "default", Key: line})
	a := apply(t, c, control.AddAccount{Name: "alice"}).Account
	g := apply(t, c, control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: "alice", Target: "dev1", Alias: "*"}}).Grant
	if a == nil || g == nil || g.XID != uint32(a.ID) {
		t.Fatalf("account %+v, grant %+v", a, g)
	}
	exp := time.Now().Add(time.Hour)
	if id := apply(t, c, control.AddToken{Account: "alice", Label: "ci", Hash: "h1", Expires: &exp}).TokenID; id <= 0 {
		t.Fatalf("token id %d", id)
	}
	apply(t, c, control.RemoveGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: "alice", Target: "dev1", Alias: "*"}})
	if gs, _ := reg.Grants(context.Background()); len(gs) != 0 {
		t.Fatalf("grants left: %v", gs)
	}
	apply(t, c, control.RemoveAccount{Account: "alice"})
	if rec.reload != 6 {
		t.Fatalf("%d reloads, want one per change (6)", rec.reload)
	}
}

// A grant names an enrolled device and one of its services, or a group with a member,
// unless AllowUnknown says it is meant for one to come (issue 52.4).
func TestGrantToWhatDoesNotExist(t *testing.T) {
	reg := openRegistry(t)
	c := control.New(reg, newRecorder())
	ctx := context.Background()
	_, key := newKey(t)
	if _, err := c.Apply(ctx, control.AddDevice{Name: "dev1", Profile: "default", Key: key, Groups: []string{"sensors"}}); err != nil {
		t.Fatal(err)
	}
	user := func(target, alias string) registry.Grant {
		return registry.Grant{Kind: registry.PrincipalUser, Name: "app", XID: 1000, Target: target, Alias: alias}
	}
	for _, g := range []registry.Grant{user("nosuch", "http"), user("dev1", "htp"), user("@nobody", "*")} {
		if _, err := c.Apply(ctx, control.AddGrant{Grant: g}); !errors.Is(err, control.ErrInvalid) {
			t.Errorf("grant %s: %v, want it refused", g, err)
		}
	}
	for _, g := range []registry.Grant{user("dev1", "http"), user("dev1", "*"), user("@sensors", "http")} {
		if _, err := c.Apply(ctx, control.AddGrant{Grant: g}); err != nil {
			t.Errorf("grant %s: %v", g, err)
		}
	}
	if _, err := c.Apply(ctx, control.AddGrant{Grant: user("dev9", "http"), AllowUnknown: true}); err != nil {
		t.Errorf("a grant to a device to come, with AllowUnknown: %v", err)
	}
	gs, err := reg.Grants(ctx)
	if err != nil || len(gs) != 4 {
		t.Fatalf("grants %v %v, want the four accepted", gs, err)
	}
	if _, err := c.Apply(ctx, control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: "nobody", Target: "dev1", Alias: registry.RightTelemetry}}); err == nil {
		t.Error("a grant to an unknown account was taken")
	}
}
