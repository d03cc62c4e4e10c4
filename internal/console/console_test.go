package console

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// fixture is a console over a real (SQLite) registry: alice may operate dev1, carol
// only view it, bob holds no console role; dev2 is nobody's.
type fixture struct {
	t   *testing.T
	reg *registry.Registry
	srv *httptest.Server
	c   *Console
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.78.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	for _, d := range []string{"dev1", "dev2"} {
		if _, err := reg.AddDevice(ctx, d, "default", nil); err != nil {
			t.Fatal(err)
		}
	}
	var grants []registry.Grant
	for _, a := range []struct{ name, right string }{{"alice", registry.RightOperate}, {"carol", registry.RightView}, {"bob", ""}} {
		hash, _ := credential.HashPassword(a.name + "-password-1")
		acct, err := reg.AddAccount(ctx, a.name, hash)
		if err != nil {
			t.Fatal(err)
		}
		if a.right != "" {
			grants = append(grants, registry.Grant{Kind: registry.PrincipalAccount, Name: a.name, XID: uint32(acct.ID), Target: "dev1", Alias: a.right})
		}
	}
	accounts, err := authn.NewAccounts(ctx, reg, authn.AccountLimits{})
	if err != nil {
		t.Fatal(err)
	}
	pol := access.NewPolicy(grants, nil, -1)
	ctl := control.New(reg, nil)
	c, err := New(Deps{Registry: reg, Accounts: accounts, Policy: func() *access.Policy { return pol }, Apply: ctl.Apply})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewTLSServer(c)
	t.Cleanup(srv.Close)
	return &fixture{t: t, reg: reg, srv: srv, c: c}
}

// client is a browser of its own: cookies, and no redirects followed.
func (f *fixture) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	// A client of its own (srv.Client() is one shared client): its own cookies.
	return &http.Client{Transport: f.srv.Client().Transport, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) post(c *http.Client, path string, form url.Values, origin string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) get(c *http.Client, path string) (int, string) {
	f.t.Helper()
	resp, err := c.Get(f.srv.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) login(name string) *http.Client {
	f.t.Helper()
	c := f.client()
	if code, body := f.post(c, "/console/login", url.Values{"user": {name}, "password": {name + "-password-1"}}, ""); code != http.StatusSeeOther {
		f.t.Fatalf("login %s: %d\n%s", name, code, body)
	}
	return c
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestConsoleRolesCSRFAndPasswords(t *testing.T) {
	f := newFixture(t)
	anon := f.client()
	if code, _ := f.get(anon, "/console/devices"); code != http.StatusSeeOther {
		t.Fatalf("not logged in: %d, want a redirect to the login", code)
	}
	if code, body := f.post(f.client(), "/console/login", url.Values{"user": {"bob"}, "password": {"bob-password-1"}}, ""); code != http.StatusUnauthorized || !strings.Contains(body, "no console role") {
		t.Fatalf("an account without a role: %d\n%s", code, body)
	}
	if code, _ := f.post(f.client(), "/console/login", url.Values{"user": {"alice"}, "password": {"alice-password-1"}}, "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("a login posted from another site: %d", code)
	}

	alice := f.login("alice")
	u, _ := url.Parse(f.srv.URL)
	var cookie *http.Cookie
	for _, ck := range alice.Jar.Cookies(u) {
		if ck.Name == CookieName {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatal("no __Host- session cookie")
	}
	code, list := f.get(alice, "/console/devices")
	if code != http.StatusOK || !strings.Contains(list, `data-device="dev1"`) || strings.Contains(list, `data-device="dev2"`) {
		t.Fatalf("alice's device list: %d\n%s", code, list)
	}
	if code, _ := f.get(alice, "/console/accounts"); code != http.StatusForbidden {
		t.Fatalf("the accounts page without +admin on @all: %d", code)
	}
	if code, _ := f.get(alice, "/console/devices/dev2"); code != http.StatusNotFound {
		t.Fatalf("a device outside alice's grants: %d, want 404", code)
	}
	if code, body := f.get(alice, "/console/devices?state=nonsense"); code != http.StatusOK || !strings.Contains(body, "want online, offline, revoked or pending") {
		t.Fatalf("a bad filter: %d", code)
	}
	_, page := f.get(alice, "/console/devices/dev1")
	m := csrfField.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `id="revoke"`) {
		t.Fatalf("alice's page of dev1 has no token or no revoke:\n%s", page)
	}
	token := m[1]
	revoked := func() bool {
		d, err := f.reg.Device(context.Background(), "dev1")
		if err != nil {
			t.Fatal(err)
		}
		return d.Revoked()
	}
	for _, c := range []struct {
		what   string
		form   url.Values
		origin string
		want   int
	}{
		{"no token", url.Values{"password": {"alice-password-1"}}, "", http.StatusForbidden},
		{"another token", url.Values{"csrf": {"x" + token}, "password": {"alice-password-1"}}, "", http.StatusForbidden},
		{"another origin", url.Values{"csrf": {token}, "password": {"alice-password-1"}}, "https://evil.example", http.StatusForbidden},
		{"a wrong password", url.Values{"csrf": {token}, "password": {"nope-nope-nope"}}, "", http.StatusForbidden},
	} {
		if code, _ := f.post(alice, "/console/devices/dev1/revoke", c.form, c.origin); code != c.want || revoked() {
			t.Errorf("%s: %d (revoked %v), want %d and nothing done", c.what, code, revoked(), c.want)
		}
	}
	if code, _ := f.post(alice, "/console/devices/dev1/remove", url.Values{"csrf": {token}, "password": {"alice-password-1"}}, ""); code != http.StatusForbidden {
		t.Fatalf("remove without +admin: %d", code)
	}
	if code, _ := f.post(alice, "/console/devices/dev1/revoke", url.Values{"csrf": {token}, "password": {"alice-password-1"}, "reason": {"lost"}}, ""); code != http.StatusSeeOther || !revoked() {
		t.Fatalf("the revoke: %d, revoked %v", code, revoked())
	}
	evs, _ := f.reg.Events(context.Background(), registry.EventFilter{Device: "dev1", Kind: EventAction})
	if len(evs) != 1 || evs[0].Detail != "account alice: revoke: lost" {
		t.Fatalf("the console action in the audit log: %+v", evs)
	}

	// carol views: no action, and her own valid token does not make one.
	carol := f.login("carol")
	_, page = f.get(carol, "/console/devices/dev1")
	if strings.Contains(page, `id="reinstate"`) || strings.Contains(page, `id="revoke"`) {
		t.Fatal("a viewer sees an action")
	}
	ct := csrfField.FindStringSubmatch(page)[1]
	if code, _ := f.post(carol, "/console/devices/dev1/reinstate", url.Values{"csrf": {ct}}, ""); code != http.StatusForbidden || !revoked() {
		t.Fatalf("a viewer's reinstate: %d", code)
	}
	// A device waiting for approval: approved by an operator; rejecting needs +admin.
	if err := f.reg.ReinstateDevice(context.Background(), "dev1"); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.RevokeDevice(context.Background(), "dev1", registry.PendingReason+" (join token 1)"); err != nil {
		t.Fatal(err)
	}
	_, page = f.get(alice, "/console/devices/dev1")
	if !strings.Contains(page, `id="approve"`) || strings.Contains(page, `id="reject"`) || strings.Contains(page, `id="reinstate"`) {
		t.Fatalf("a pending device's actions for an operator:\n%s", page)
	}
	if code, _ := f.post(alice, "/console/devices/dev1/reject", url.Values{"csrf": {token}, "password": {"alice-password-1"}}, ""); code != http.StatusForbidden {
		t.Fatalf("a reject without +admin: %d", code)
	}
	if code, _ := f.post(alice, "/console/devices/dev1/approve", url.Values{"csrf": {token}}, ""); code != http.StatusSeeOther || revoked() {
		t.Fatalf("the approval: %d, still refused %v", code, revoked())
	}
	if code, _ := f.post(alice, "/console/devices/dev1/approve", url.Values{"csrf": {token}}, ""); code != http.StatusConflict {
		t.Fatalf("approving a device not waiting: %d", code)
	}

	// Exports: JSON lines and CSV, a formula-looking field quoted.
	if code, body := f.get(alice, "/console/audit?format=csv&device=dev1"); code != http.StatusOK || !strings.HasPrefix(body, "id,time,device,kind,detail") {
		t.Fatalf("CSV export: %d\n%s", code, body)
	}
	if code, body := f.get(alice, "/console/audit?format=jsonl&kind="+EventAction); code != http.StatusOK || !strings.Contains(body, `"kind":"console_action"`) {
		t.Fatalf("JSON lines export: %d\n%s", code, body)
	}
}

func TestSafeNextAndCSV(t *testing.T) {
	for next, want := range map[string]string{
		"/console/devices?q=a": "/console/devices?q=a", "https://evil.example/": "", "//evil.example/console/": "",
		"/console/\\evil": "", "/other": "",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
	if csvSafe("=cmd|' /C calc'!A0") != "'=cmd|' /C calc'!A0" || csvSafe("dev1") != "dev1" {
		t.Error("csvSafe")
	}
}

// The live feed tells a page of the events it cares about, and only those; it holds at
// most 8 streams per account.
func TestLiveFeed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dev1, err := f.c.live.subscribe(1, func(e registry.Event) bool { return e.Device == "dev1" })
	if err != nil {
		t.Fatal(err)
	}
	defer f.c.live.unsubscribe(dev1)
	dev2, _ := f.c.live.subscribe(1, func(e registry.Event) bool { return e.Device == "dev2" })
	defer f.c.live.unsubscribe(dev2)
	<-f.c.live.positioned // the feed starts from where the log ends: news come after
	if err := f.reg.AddEvent(ctx, registry.Event{Device: "dev1", Kind: "test"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dev1.wake:
	case <-time.After(30 * time.Second):
		t.Fatal("the page of dev1 was not told")
	}
	select {
	case <-dev2.wake:
		t.Fatal("the page of dev2 was told of dev1's event")
	default:
	}
	var subs []*liveSub
	for range maxStreamsPerAccount - 2 {
		s, err := f.c.live.subscribe(1, func(registry.Event) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, err := f.c.live.subscribe(1, func(registry.Event) bool { return false }); err == nil {
		t.Fatal("a ninth stream of one account was taken")
	}
	for _, s := range subs {
		f.c.live.unsubscribe(s)
	}
}
