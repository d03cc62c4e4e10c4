package e2e

import (
	"io"
	"net/http/cookiejar"
	"regexp"

	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/pgscratch"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/ssh"
)

// browser is a headless Chromium of its own (its own profile: its own cookies),
// resolving the front door's domain to loopback and trusting the hub's local CA.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string // https://DOMAIN:PORT
	shots string
}

func newBrowser(t *testing.T, h *hubProc) *browser {
	t.Helper()
	exe := needTool(t, "chromium")
	// The front door's certificate for its domain, as the hub's CA issued it.
	conn, err := tls.Dial("tcp", h.front, &tls.Config{ServerName: fdDomain, InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	cert := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	spki := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // the tests run as root
		chromedp.Flag("host-resolver-rules", "MAP "+fdDomain+" 127.0.0.1"),
		// The front door's own certificate (its key pinned, as the hub's CA issued it).
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()), // the SPKI list is honoured only with a profile of its own
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	// An injected script that ran would open a dialog: that is a failure, said here.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			t.Errorf("a page opened a JavaScript dialog (an injected script?): %q", ev.Message)
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return &browser{t: t, ctx: ctx, base: "https://" + fdDomain + ":" + portOf(h.front), shots: t.ArtifactDir()}
}

// do runs steps with a deadline; a wait for something that never shows fails here,
// with where the browser is and what it shows.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").outerHTML : document.documentElement.outerHTML`))
		b.t.Fatalf("%s: %v\nat %s:\n%s", what, err, loc, html)
	}
}

// shot saves a screenshot of the whole page into the test's output.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) login(user, pw string) {
	b.t.Helper()
	b.do("log in as "+user,
		chromedp.Navigate(b.base+"/console/"),
		chromedp.WaitVisible(chromedp.ID("user")),
		chromedp.SendKeys(chromedp.ID("user"), user),
		chromedp.SendKeys(chromedp.ID("password"), pw),
		chromedp.Submit(chromedp.ID("password")),
		chromedp.WaitVisible(chromedp.CSS("[data-count=online]")),
	)
}

// text is the text of the first element matching the CSS selector.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// eval runs a script in the page (a promise is awaited) and returns its result.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// The operator console in a real Chromium, against a real hub with real agents (issue
// 50): log in; see dev1..dev3 online; open dev3 and revoke it in the browser (confirmed
// with the password): its agent's session closes and the page says so; the page of
// another device updates live when it is revoked elsewhere; reinstate dev3 and see it
// back; a viewer gets no revoke button and a forged or cross-site POST is refused; what
// a device announces (its SSH client version) is shown escaped. Screenshots of each page
// go to the test's output (go test -artifacts).
func TestConsoleInChromium(t *testing.T) {
	h := startHub(t, "", "frontdoor:\n  listen: 127.0.0.1:0\n  domain: "+fdDomain+"\n")
	app := deviceApp(t, "hello")
	agents := map[string]*proc{}
	keys := map[string]string{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("dev%d", i)
		keys[name] = h.addDevice(name)
		agents[name] = startAgent(t, h, keys[name], "--expose", "http="+hostPortOf(app))
		agents[name].stderr.wait(t, "session up")
	}
	// A device whose SSH client announces HTML (what an attacker's device can say).
	evilKey := h.addDevice("dev4")
	evil := dialAsDevice(t, h, "dev4", evilKey, "SSH-2.0-<script>alert(1)</script><img/src=x/onerror=alert(2)>")
	defer evil.Close()
	h.addAccount("olivia", "olivia-password-1")
	h.mustCLI("grant", "--account", "olivia", "@all", "+admin")
	h.addAccount("victor", "victor-password-1")
	h.mustCLI("grant", "--account", "victor", "@all", "+view")
	h.addAccount("nadia", "nadia-password-1") // no console role

	b := newBrowser(t, h)
	b.do("the login page", chromedp.Navigate(b.base+"/console/"), chromedp.WaitVisible(chromedp.ID("user")))
	b.shot("01-login")
	b.login("olivia", "olivia-password-1")
	if got := b.text(`[data-count=online]`); got != "4" {
		t.Fatalf("devices online on the fleet page: %q, want 4", got)
	}
	b.shot("02-fleet")
	// The hub's own scan, recorded: the fleet page shows its result.
	h.cli("scan", "--hub") // its exit status rates the hub; the record is what is checked
	b.do("the fleet page after a scan", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("last-scan")))
	if s := b.text(`#last-scan`); !strings.Contains(s, "endpoint(s), worst finding") {
		t.Fatalf("the last scan on the fleet page: %q", s)
	}
	if c := b.text(`main`); !strings.Contains(c, "Front door certificate (devices.test)") {
		t.Fatalf("the fleet page names no certificate expiry:\n%s", c)
	}
	b.do("the device list", chromedp.Navigate(b.base+"/console/devices?state=online"), chromedp.WaitVisible(chromedp.ID("devices")))
	for i := 1; i <= 3; i++ {
		if s := b.text(fmt.Sprintf(`tr[data-device="dev%d"] .state-online`, i)); s != "online" {
			t.Fatalf("dev%d in the list: %q", i, s)
		}
	}
	b.shot("03-devices")

	// dev4's announced strings, escaped: shown as text, nothing run or inserted.
	b.do("dev4's page", chromedp.Navigate(b.base+"/console/devices/dev4"), chromedp.WaitVisible(chromedp.ID("sessions")))
	if c := b.text(`#sessions .client`); !strings.Contains(c, "<script>alert(1)</script><img/src=x/onerror=alert(2)>") {
		t.Fatalf("dev4's client version as shown: %q", c)
	}
	if injected := eval[int](b, `document.querySelectorAll("main script, main img").length`); injected != 0 {
		t.Fatalf("dev4's announced HTML became %d element(s) of the page", injected)
	}
	b.shot("04-device-escaped")

	// dev1's telemetry: its notifications charted (one carries HTML: shown as text), and
	// a command sent from the browser reaching the device's own REST view.
	ca, _ := os.ReadFile(filepath.Join(h.data, "frontdoor", "ca.crt"))
	rc := fdClient(t, h, string(ca), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	_, toks, _ := restCall(t, rc, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": secret})
	access, _ := toks["accessToken"].(string)
	for i, c := range []float64{19.5, 20.25, 21, 20.5} {
		if code, _, _ := restCall(t, rc, "POST", api+"/device/dev1/notification", "Bearer "+access,
			map[string]any{"notification": "temperature", "parameters": map[string]any{"celsius": c, "seq": i}}); code != 201 {
			t.Fatalf("notification %d: %d", i, code)
		}
	}
	restCall(t, rc, "POST", api+"/device/dev1/notification", "Bearer "+access,
		map[string]any{"notification": "<b>bold</b>", "parameters": map[string]any{"note": "<script>alert(3)</script>"}})
	b.do("dev1's telemetry", chromedp.Navigate(b.base+"/console/devices/dev1"), chromedp.WaitVisible(chromedp.CSS(".chart polyline")))
	if caption := b.text(`.chart figcaption`); !strings.Contains(caption, "temperature · celsius: last 20.5") {
		t.Fatalf("the chart: %q", caption)
	}
	if notes := b.text(`#notifications`); !strings.Contains(notes, "<b>bold</b>") || !strings.Contains(notes, "alert(3)") {
		t.Fatalf("dev1's notifications as shown:\n%s", notes)
	}
	if n := eval[int](b, `document.querySelectorAll("#notifications b, #notifications script").length`); n != 0 {
		t.Fatalf("a notification's HTML became %d element(s)", n)
	}
	b.do("send dev1 a command",
		chromedp.SendKeys(chromedp.ID("command"), "blink"),
		chromedp.SendKeys(chromedp.ID("parameters"), `{"times": 3}`),
		chromedp.Click(chromedp.ID("send-command")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
	)
	if cmds := b.text(`#commands`); !strings.Contains(cmds, "blink") || !strings.Contains(cmds, `{"times":3}`) {
		t.Fatalf("dev1's commands after sending one:\n%s", cmds)
	}
	if _, _, list := restCall(t, rc, "GET", api+"/device/dev1/command", "Bearer "+access, nil); len(list) != 1 || list[0].(map[string]any)["command"] != "blink" {
		t.Fatalf("the command, as the device lists it: %v", list)
	}
	b.shot("05-device-telemetry")
	// Rotate dev1's secret in the browser: shown once; the old one no longer logs in.
	b.do("rotate dev1's secret",
		chromedp.Click(chromedp.ID("rotate-secret")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.SendKeys(chromedp.ID("password"), "olivia-password-1"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.ID("secret")),
	)
	newSecret := b.text(`#secret`)
	if code, _, _ := restCall(t, rc, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": secret}); code != http.StatusUnauthorized {
		t.Fatalf("the old secret after the rotation: %d", code)
	}
	if code, _, _ := restCall(t, rc, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": newSecret}); code/100 != 2 {
		t.Fatalf("the new secret: %d", code)
	}

	// Revoke dev3 in the browser: confirmed with the password; its session closes.
	b.do("dev3's page", chromedp.Navigate(b.base+"/console/devices/dev3"), chromedp.WaitVisible(chromedp.ID("sessions")))
	if kex := b.text(`#sessions tbody tr td:nth-child(3)`); kex == "" {
		t.Fatal("dev3's session shows no key exchange")
	}
	b.shot("06-device")
	b.do("revoke dev3",
		chromedp.Click(chromedp.ID("revoke")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.SendKeys(chromedp.ID("reason"), "lost in the field"),
		chromedp.SendKeys(chromedp.ID("password"), "wrong-password-1"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.CSS(`.err`)),
	)
	if e := b.text(`.err`); !strings.Contains(e, "password") {
		t.Fatalf("a wrong password: %q", e)
	}
	if h.device("dev3").Revoked != nil {
		t.Fatal("dev3 was revoked with a wrong password")
	}
	b.shot("07-confirm-wrong-password")
	b.do("revoke dev3 with the password",
		chromedp.SendKeys(chromedp.ID("password"), "olivia-password-1"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.CSS(`#device-state .state-revoked`)),
	)
	if n := b.text(`.notice`); !strings.Contains(n, "1 live session(s) closed") {
		t.Fatalf("after the revoke: %q", n)
	}
	agents["dev3"].stderr.wait(t, "the hub says this device's key is revoked; waiting for a new key file or the retry time")
	if ev := h.events("dev3", "console_action"); len(ev) != 1 || !strings.Contains(ev[0].Detail, "account olivia: revoke: lost in the field") {
		t.Fatalf("the revoke in the audit log: %+v", ev)
	}
	b.shot("08-device-revoked")

	// Live: dev2's page, revoked from the command line, says so without a reload.
	b.do("dev2's page", chromedp.Navigate(b.base+"/console/devices/dev2"), chromedp.WaitVisible(chromedp.CSS(`#device-state .state-online`)))
	h.mustCLI("device", "revoke", "dev2")
	b.do("dev2's page, updated live", chromedp.WaitVisible(chromedp.CSS(`#device-state .state-revoked`)))
	b.shot("09-device-revoked-live")

	// Reinstate dev3: it is let in again, and its next session shows live.
	b.do("reinstate dev3",
		chromedp.Navigate(b.base+"/console/devices/dev3"),
		chromedp.Click(chromedp.ID("reinstate")),
		chromedp.WaitVisible(chromedp.CSS(`#device-state .state-offline`)),
	)
	agents["dev3"].cmd.Process.Kill() // it would wait an hour; a restarted agent tries now
	agents["dev3"] = startAgent(t, h, keys["dev3"], "--expose", "http="+hostPortOf(app))
	b.do("dev3 back, live", chromedp.WaitVisible(chromedp.CSS(`#device-state .state-online`)))
	b.shot("10-device-reinstated")

	// The crypto posture: a stock OpenSSH client offering one key exchange only; the
	// dry run of dropping it from the hub lists that device, and only it.
	stockKey := h.addDevice("dev5")
	startProc(t, needTool(t, "ssh"), append(sshArgs(h, stockKey), "-o", "KexAlgorithms=curve25519-sha256", "-o", "Ciphers=aes256-gcm@openssh.com",
		"-R", "http:80:"+hostPortOf(app), "dev5@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev5")
	b.do("the crypto page", chromedp.Navigate(b.base+"/console/crypto"), chromedp.WaitVisible(chromedp.ID("dry-run")))
	if tables := b.text(`main .grid`); !strings.Contains(tables, "curve25519-sha256") || !strings.Contains(tables, "mlkem768x25519-sha256") || !strings.Contains(tables, "OpenSSH") {
		t.Fatalf("the fleet's negotiated algorithms:\n%s", tables)
	}
	b.shot("11-crypto")
	b.do("a dry run",
		chromedp.SendKeys(chromedp.ID("algorithm"), "curve25519-sha256"),
		chromedp.Click(chromedp.ID("dry-run")),
		chromedp.WaitVisible(chromedp.ID("dry-run-result")),
	)
	if lose, total := b.text(`#lose`), b.text(`#lose-total`); lose != "dev5" || total != "1" {
		t.Fatalf("dropping curve25519-sha256 locks out %s: %q", total, lose)
	}
	b.shot("12-crypto-dry-run")
	b.do("a dry run of a cipher the agents do not use",
		chromedp.Navigate(b.base+"/console/crypto?category=cipher&algorithm=aes256-gcm@openssh.com"),
		chromedp.WaitVisible(chromedp.ID("dry-run-result")))
	if lose := b.text(`#lose-total`); lose != "1" {
		t.Fatalf("dropping aes256-gcm: %s lose their session, want dev5 alone", lose)
	}

	b.do("the audit log", chromedp.Navigate(b.base+"/console/audit?kind=console_action"), chromedp.WaitVisible(chromedp.ID("audit")))
	if a := b.text(`#audit`); !strings.Contains(a, "account olivia: reinstate") || !strings.Contains(a, "account olivia: revoke") {
		t.Fatalf("console actions in the audit log page:\n%s", a)
	}
	b.shot("13-audit")
	b.do("a phone-width screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(b.base+"/console/devices"), chromedp.WaitVisible(chromedp.ID("devices")))
	b.shot("14-devices-phone")

	// Accounts and grants: the admin grants victor +operate on dev1 in the browser, and
	// victor's next page of dev1 offers the revoke.
	b.do("the accounts page", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(b.base+"/console/accounts"), chromedp.WaitVisible(chromedp.ID("accounts")))
	if a := b.text(`#accounts`); !strings.Contains(a, "@all: +admin") || !strings.Contains(a, "@all: +view") {
		t.Fatalf("the accounts page:\n%s", a)
	}
	b.do("grant victor +operate on dev1",
		chromedp.SetValue(chromedp.ID("account"), "victor"),
		chromedp.SendKeys(chromedp.ID("target"), "dev1"),
		chromedp.SendKeys(chromedp.ID("what"), "+operate"),
		chromedp.Click(chromedp.ID("grant")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
	)
	if n := b.text(`.notice`); n != "granted victor dev1 +operate" {
		t.Fatalf("after the grant: %q", n)
	}
	if g := h.mustCLI("grants"); !strings.Contains(g, "victor") || !strings.Contains(g, "+operate") {
		t.Fatalf("the grant, as the CLI lists it:\n%s", g)
	}
	b.shot("14a-accounts")

	// A forged POST (no CSRF token), from the admin's own browser: refused.
	status := eval[int](b, `fetch("/console/devices/dev1/revoke", {method: "POST", body: new URLSearchParams({password: "olivia-password-1"})}).then(r => r.status)`)
	if status != http.StatusForbidden || h.device("dev1").Revoked != nil {
		t.Fatalf("a POST without the CSRF token: %d, dev1 revoked: %v", status, h.device("dev1").Revoked != nil)
	}
	// A cross-site POST carrying the session cookie and even a valid token: refused.
	cookies, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var sid string
	for _, c := range cookies.Cookies {
		if c.Name == "__Host-iotsafe-console" {
			sid = c.Value
			if !c.Secure || !c.HTTPOnly || c.Domain != fdDomain || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("the console cookie: %+v", c)
			}
		}
	}
	token := eval[string](b, `document.querySelector("input[name=csrf]").value`)
	form := url.Values{"csrf": {token}, "password": {"olivia-password-1"}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+fdDomain+"/console/devices/dev1/revoke", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.AddCookie(&http.Cookie{Name: "__Host-iotsafe-console", Value: sid})
	if resp := do(t, rc, req); resp.StatusCode != http.StatusForbidden || h.device("dev1").Revoked != nil {
		t.Fatalf("a cross-site POST: %d", resp.StatusCode)
	}

	// victor views the fleet and operates dev1 (the grant above): the revoke on dev1 only,
	// no admin action, and a revoke of dev4 refused even with his own token.
	v := newBrowser(t, h)
	v.login("victor", "victor-password-1")
	v.do("dev1's page as its operator", chromedp.Navigate(v.base+"/console/devices/dev1"), chromedp.WaitVisible(chromedp.ID("sessions")))
	if buttons := eval[int](v, `document.querySelectorAll("#remove, #reinstate").length`); buttons != 0 {
		t.Fatalf("victor, operator of dev1 only, sees %d admin button(s)", buttons)
	}
	if revoke := eval[int](v, `document.querySelectorAll("#revoke").length`); revoke != 1 {
		t.Fatal("victor, granted +operate on dev1 in the console, has no revoke button")
	}
	// On dev4, where victor only views: no action at all.
	v.do("dev4's page as a viewer", chromedp.Navigate(v.base+"/console/devices/dev4"), chromedp.WaitVisible(chromedp.ID("sessions")))
	if buttons := eval[int](v, `document.querySelectorAll("#revoke, #remove, #reinstate, #send-command").length`); buttons != 0 {
		t.Fatalf("a viewer sees %d action(s)", buttons)
	}
	if eval[int](v, `document.querySelectorAll("nav a[href='/console/accounts']").length`) != 0 {
		t.Fatal("a viewer is offered the accounts page")
	}
	v.shot("15-device-viewer")
	status = eval[int](v, `fetch("/console/devices/dev4/revoke", {method: "POST", body: new URLSearchParams({csrf: document.querySelector("input[name=csrf]").value, password: "victor-password-1"})}).then(r => r.status)`)
	if status != http.StatusForbidden || h.device("dev4").Revoked != nil {
		t.Fatalf("a viewer's revoke: %d", status)
	}
	// An account without a console role is told so at the login.
	n := newBrowser(t, h)
	n.do("log in without a role",
		chromedp.Navigate(n.base+"/console/login"),
		chromedp.SendKeys(chromedp.ID("user"), "nadia"),
		chromedp.SendKeys(chromedp.ID("password"), "nadia-password-1"),
		chromedp.Submit(chromedp.ID("password")),
		chromedp.WaitVisible(chromedp.CSS(`.err`)),
	)
	if e := n.text(`.err`); !strings.Contains(e, "no console role") {
		t.Fatalf("an account without a role: %q", e)
	}
}

// dialAsDevice opens a session as device with its key and the client version given
// (the x/crypto client: it announces any version string, as an attacker's device can).
func dialAsDevice(t *testing.T, h *hubProc, device, keyFile, version string) *ssh.Client {
	t.Helper()
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.hostPK))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", h.addr, &ssh.ClientConfig{User: device, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), ClientVersion: version, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.log.wait(t, "session open", "device", device)
	return c
}

// The console on one hub of a shared PostgreSQL registry: it shows a device whose
// session another hub holds, and a revoke made there closes that session on the other
// hub (the registry's change feed); a form loaded from one hub posts to the other.
func TestConsoleAcrossHubs(t *testing.T) {
	dsn := pgscratch.Start(t).Database(t)
	a := startSharedHub(t, dsn, "hub-a", "127.78.13.0/24", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	b := startSharedHub(t, dsn, "hub-b", "127.78.13.0/24", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	key := a.addDevice("dev-x")
	app := deviceApp(t, "hello")
	agent := startProc(t, iotsafeBin, "agent", "--hub", b.addr, "--hub-key", b.hostFP, "--key", key, "--expose", "http="+hostPortOf(app), "--log-format", "json")
	agent.stderr.wait(t, "session up")
	a.addAccount("olivia", "olivia-password-1")
	a.mustCLI("grant", "--account", "olivia", "@all", "+admin")

	ca, _ := os.ReadFile(filepath.Join(a.data, "frontdoor", "ca.crt"))
	jar, _ := cookiejar.New(nil)
	c := fdClient(t, a, string(ca), jar)
	base := "https://" + fdDomain + ":" + portOf(a.front) + "/console"
	form := url.Values{"user": {"olivia"}, "password": {"olivia-password-1"}}
	if resp, err := c.PostForm(base+"/login", form); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %v %v", resp, err)
	}
	resp, err := c.Get(base + "/devices/dev-x")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `class="state-online">online</b> at hub <b>hub-b</b>`) || !strings.Contains(string(page), "Its session is held by hub hub-b") {
		t.Fatalf("dev-x's page on hub-a:\n%s", page)
	}
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(page))[1]
	req, _ := http.NewRequest(http.MethodPost, base+"/devices/dev-x/revoke", strings.NewReader(url.Values{"csrf": {token}, "password": {"olivia-password-1"}, "reason": {"across hubs"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://"+fdDomain+":"+portOf(a.front))
	if resp := do(t, c, req); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the revoke on hub-a: %d", resp.StatusCode)
	}
	b.log.wait(t, "session closed", "device", "dev-x", "why", "key revoked")

	// The form's token of hub-a's page is good at hub-b too (one key in the registry),
	// as is the login session: a reinstate posted there works.
	caB, _ := os.ReadFile(filepath.Join(b.data, "frontdoor", "ca.crt"))
	cb := fdClient(t, b, string(caB), jar)
	req, _ = http.NewRequest(http.MethodPost, "https://"+fdDomain+":"+portOf(b.front)+"/console/devices/dev-x/reinstate", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp := do(t, cb, req); resp.StatusCode != http.StatusSeeOther || a.device("dev-x").Revoked != nil {
		t.Fatalf("a reinstate posted to hub-b with hub-a's form: %d", resp.StatusCode)
	}
}
