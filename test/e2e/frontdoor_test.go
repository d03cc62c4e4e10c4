package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

const fdDomain = "devices.test"

// frontdoorApp is the device's web application: it reports what reached it, echoes
// uploads, streams server-sent events on command and echoes WebSocket messages.
type frontdoorApp struct {
	srv       *httptest.Server
	lastHdr   atomic.Pointer[http.Header]
	sseSecond chan struct{}
}

func newFrontdoorApp(t *testing.T) *frontdoorApp {
	a := &frontdoorApp{sseSecond: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("X-Seen-Host", r.Host)
		a.lastHdr.Store(&h)
		fmt.Fprint(w, "device 42 says hi")
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "got %d bytes", n)
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select { // the second event only after the client proved it got the first
		case <-a.sseSecond:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: second\n\n")
	})
	mux.Handle("/ws", websocket.Handler(func(c *websocket.Conn) {
		for {
			var msg string
			if websocket.Message.Receive(c, &msg) != nil || websocket.Message.Send(c, msg) != nil {
				return
			}
		}
	}))
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// fdClient is a Go HTTPS client that trusts only the exported CA and sends every
// front-door name to the hub's listener (no DNS needed).
func fdClient(t *testing.T, h *hubProc, ca string, jar http.CookieJar) *http.Client {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		t.Fatalf("exported CA is not PEM: %q", ca)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, h.front)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// fdCurl runs the real curl against the front door, trusting only the exported CA;
// it returns the body and the status line curl saw.
func fdCurl(t *testing.T, h *hubProc, caFile, host string, args ...string) (body string, code int, proto string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, port, _ := net.SplitHostPort(h.front)
	base := []string{"-sS", "--cacert", caFile, "--resolve", host + ":" + port + ":127.0.0.1",
		"-w", "\n%{http_code} %{http_version}"}
	all := append(append(base, args...), fmt.Sprintf("https://%s:%s/", host, port))
	if strings.HasPrefix(args[len(args)-1], "/") { // a path as the last argument
		all = append(append(base, args[:len(args)-1]...), fmt.Sprintf("https://%s:%s%s", host, port, args[len(args)-1]))
	}
	out, err := exec.CommandContext(ctx, needTool(t, "curl"), all...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", all, err, out)
	}
	s := string(out)
	i := strings.LastIndex(s, "\n")
	fmt.Sscanf(s[i+1:], "%d %s", &code, &proto)
	return s[:i], code, proto
}

// The front door end to end: real curl over HTTP/1.1 and HTTP/2 verifying the exported
// CA, the Go client for logins, streaming and WebSocket; every refusal a person can meet.
func TestFrontdoor(t *testing.T) {
	h := startHub(t, "", `frontdoor:
  listen: 127.0.0.1:0
  domain: `+fdDomain+`
  max_failed_logins: 3
  routes:
    - {alias: upload, max_body: 1KiB}
    - {alias: cam, response_timeout: 1s}
`)
	if h.front == "" {
		t.Fatal("hub did not print its front door address")
	}
	prof := filepath.Join(h.data, "web.yaml")
	os.WriteFile(prof, []byte("name: web\nreverse: {http: 80, upload: 81, cam: 82}\n"), 0o600)
	key := h.addDevice("dev42", "--profile", prof)
	h.addDevice("dev43", "--group", "lab")
	h.addDevice("dev44")
	app := newFrontdoorApp(t)
	agent := startAgent(t, h, key, "--expose", "http="+hostPortOf(app.srv), "--expose", "upload="+hostPortOf(app.srv), "--expose", "cam="+hostPortOf(app.srv))
	agent.stderr.wait(t, "session up")

	// Scripts must say where the password comes from; short passwords are refused.
	if out, err := h.cli("account", "add", "carol"); err == nil || !strings.Contains(out, "use --password-stdin") {
		t.Fatalf("account add without a terminal: %v %s", err, out)
	}
	cmd := exec.Command(iotsafeBin, "account", "add", "carol", "--password-stdin", "--data", h.data)
	cmd.Stdin = strings.NewReader("short\n")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "password too short") {
		t.Fatalf("short password: %v %s", err, out)
	}
	h.addAccount("alice", "alice-password-1")
	h.addAccount("bob", "bob-password-22")
	h.mustCLI("grant", "--account", "alice", "dev42", "http")
	h.mustCLI("grant", "--account", "alice", "dev42", "upload")
	h.mustCLI("grant", "--account", "alice", "@lab", "*")
	h.mustCLI("grant", "--account", "bob", "dev42", "*")
	token := strings.TrimSpace(h.mustCLIStdout("account", "token", "alice", "--label", "test"))

	ca := h.mustCLI("frontdoor", "ca")
	caFile := filepath.Join(h.data, "exported-ca.crt")
	os.WriteFile(caFile, []byte(ca), 0o644)
	fi, err := os.Stat(filepath.Join(h.data, "frontdoor", "ca.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	dev42 := "dev42." + fdDomain

	t.Run("curl HTTP/1.1 with a password", func(t *testing.T) {
		body, code, proto := fdCurl(t, h, caFile, dev42, "--http1.1", "--tls-max", "1.2", "-u", "alice:alice-password-1",
			"-H", "Forwarded: for=6.6.6.6", "-H", "Connection: X-Hop", "-H", "X-Hop: secret")
		if code != 200 || proto != "1.1" || body != "device 42 says hi" {
			t.Fatalf("TLS 1.2: got %d HTTP/%s %q", code, proto, body)
		}
		hdr := *app.lastHdr.Load()
		if hdr.Get("X-Hop") != "" {
			t.Error("a hop-by-hop header reached the device")
		}
		if hdr.Get("Authorization") != "" {
			t.Error("the front door's credentials reached the device")
		}
		if got := hdr.Get("Forwarded"); got != `for=127.0.0.1;host="`+dev42+":"+portOf(h.front)+`";proto=https` {
			t.Errorf("Forwarded = %q (the client's own one must be replaced)", got)
		}
		if hdr.Get("X-Forwarded-For") != "127.0.0.1" || hdr.Get("X-Forwarded-Proto") != "https" {
			t.Errorf("X-Forwarded-* = %v", hdr)
		}
		if !strings.HasPrefix(hdr.Get("X-Seen-Host"), dev42) {
			t.Errorf("device saw Host %q", hdr.Get("X-Seen-Host"))
		}
	})
	t.Run("curl HTTP/2 with a token", func(t *testing.T) {
		body, code, proto := fdCurl(t, h, caFile, "http."+dev42, "--http2", "-H", "Authorization: Bearer "+token)
		if code != 200 || proto != "2" || body != "device 42 says hi" {
			t.Fatalf("got %d HTTP/%s %q", code, proto, body)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		// Wrong credentials come from addresses of their own: each failure counts against
		// its client address (max_failed_logins: 3), tested below.
		for _, c := range []struct {
			name, host string
			args       []string
			code       int
			want       string
		}{
			{"no credentials", dev42, []string{"-D", "-"}, 401, `WWW-Authenticate: Basic realm="iotsafe"`},
			{"wrong password", dev42, []string{"--interface", "127.0.0.2", "-u", "alice:not-her-password"}, 401, "wrong account name, password or token"},
			{"unknown account", dev42, []string{"--interface", "127.0.0.3", "-u", "nobody:whatever-password"}, 401, "wrong account name, password or token"},
			{"bad token", dev42, []string{"--interface", "127.0.0.4", "-H", "Authorization: Bearer iots_bogus"}, 401, "wrong account name, password or token"},
			{"alias not granted", "cam." + dev42, []string{"-u", "alice:alice-password-1"}, 403, "account alice may not reach service cam of device dev42"},
			{"device not granted", "dev44." + fdDomain, []string{"-u", "alice:alice-password-1"}, 404, "no device dev44 here"},
			{"device unknown", "dev99." + fdDomain, []string{"-u", "alice:alice-password-1"}, 404, "no device dev99 here"},
			{"device never connected", "dev43." + fdDomain, []string{"-u", "alice:alice-password-1"}, 502, "device dev43 is offline (it has never connected)"},
			{"service the device never offered", "x." + dev42, []string{"-u", "bob:bob-password-22"}, 404, "device dev42 has no service x"},
			{"unknown host", "dev42.example.org", []string{"-k", "-u", "alice:alice-password-1"}, 404, "unknown host name"},
			{"body too large", "upload." + dev42, []string{"-u", "alice:alice-password-1", "--data-binary", strings.Repeat("x", 2000), "/upload"}, 413, "request body larger than 1024 bytes"},
			{"chunked body too large", "upload." + dev42, []string{"-u", "alice:alice-password-1", "-H", "Transfer-Encoding: chunked", "--http1.1", "--data-binary", strings.Repeat("x", 5000), "/upload"}, 413, "request body larger than 1024 bytes"},
			{"device does not answer", "cam." + dev42, []string{"-u", "bob:bob-password-22", "/hang"}, 504, "device dev42 did not answer within 1s"},
			{"body within limit", "upload." + dev42, []string{"-u", "alice:alice-password-1", "--data-binary", strings.Repeat("x", 1000), "/upload"}, 200, "got 1000 bytes"},
		} {
			body, code, _ := fdCurl(t, h, caFile, c.host, c.args...)
			if code != c.code || !strings.Contains(strings.ToLower(body), strings.ToLower(c.want)) {
				t.Errorf("%s: got %d %q; want %d containing %q", c.name, code, body, c.code, c.want)
			}
		}
	})
	t.Run("offline device", func(t *testing.T) {
		// dev43 had a session once: its socket exists and its last contact is known.
		k43 := filepath.Join(h.data, "keys", "dev43")
		a43 := startAgent(t, h, k43, "--expose", "http="+hostPortOf(app.srv))
		a43.stderr.wait(t, "session up")
		if _, code, _ := fdCurl(t, h, caFile, "dev43."+fdDomain, "-u", "alice:alice-password-1"); code != 200 {
			t.Fatalf("dev43 online: %d", code)
		}
		a43.cmd.Process.Kill()
		<-a43.exited
		h.log.wait(t, "session closed", "device", "dev43")
		body, code, _ := fdCurl(t, h, caFile, "dev43."+fdDomain, "-u", "alice:alice-password-1")
		if code != 502 || !strings.Contains(body, "device dev43 is offline since 20") {
			t.Fatalf("got %d %q", code, body)
		}
	})
	t.Run("token revoked", func(t *testing.T) {
		tok2 := strings.TrimSpace(h.mustCLIStdout("account", "token", "alice"))
		if _, code, _ := fdCurl(t, h, caFile, dev42, "-H", "Authorization: Bearer "+tok2); code != 200 {
			t.Fatalf("fresh token: %d", code)
		}
		var toks []struct {
			ID int64 `json:"id"`
		}
		json.Unmarshal([]byte(h.mustCLI("account", "tokens", "alice", "-o", "json")), &toks)
		h.mustCLI("account", "revoke-token", "alice", fmt.Sprint(toks[len(toks)-1].ID))
		if body, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.6", "-H", "Authorization: Bearer "+tok2); code != 401 {
			t.Fatalf("revoked token: %d %q", code, body)
		}
	})

	jar, _ := cookiejar.New(nil)
	c := fdClient(t, h, ca, jar)
	t.Run("login page and session cookie", func(t *testing.T) {
		// A browser without a session is sent to the login page, with the way back.
		req, _ := http.NewRequest("GET", "https://"+dev42+"/a?b=1", nil)
		req.Header.Set("Accept", "text/html")
		resp := do(t, c, req)
		loc := resp.Header.Get("Location")
		if resp.StatusCode != 303 || loc != "https://"+fdDomain+"/login?next="+url.QueryEscape("https://"+dev42+"/a?b=1") {
			t.Fatalf("got %d, Location %q", resp.StatusCode, loc)
		}
		form := url.Values{"user": {"alice"}, "password": {"alice-password-1"}, "next": {"https://" + dev42 + "/"}}
		resp, err := c.PostForm("https://"+fdDomain+"/login", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		sc := resp.Header.Get("Set-Cookie")
		for _, attr := range []string{"iotsafe_session=", "Domain=" + fdDomain, "Secure", "HttpOnly", "SameSite=Lax"} {
			if !strings.Contains(sc, attr) {
				t.Errorf("Set-Cookie %q lacks %s", sc, attr)
			}
		}
		if resp.StatusCode != 303 || resp.Header.Get("Location") != "https://"+dev42+"/" {
			t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		req, _ = http.NewRequest("GET", "https://"+dev42+"/", nil)
		req.Header.Set("Cookie", "theme=dark")
		resp = do(t, c, req)
		if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
			t.Fatalf("with the session cookie: %d %s", resp.StatusCode, resp.Proto)
		}
		if got := app.lastHdr.Load().Get("Cookie"); strings.Contains(got, "iotsafe_session") || !strings.Contains(got, "theme=dark") {
			t.Errorf("device saw Cookie %q: the session cookie must be removed, the app's kept", got)
		}
		// The portal lists what alice may reach.
		req, _ = http.NewRequest("GET", "https://"+fdDomain+"/", nil)
		req.Header.Set("Accept", "application/json")
		resp = do(t, c, req)
		var list struct {
			Account string `json:"account"`
			Devices []struct {
				Name     string `json:"name"`
				Services []struct{ Alias string }
			} `json:"devices"`
		}
		json.NewDecoder(strings.NewReader(readBody(t, resp))).Decode(&list)
		if list.Account != "alice" || len(list.Devices) != 2 || list.Devices[0].Name != "dev42" || len(list.Devices[0].Services) != 2 {
			t.Errorf("device list %+v", list)
		}
		// An open redirect is refused: next must stay in the front door.
		form.Set("next", "https://evil.example/")
		resp, _ = c.PostForm("https://"+fdDomain+"/login", form)
		resp.Body.Close()
		if resp.Header.Get("Location") != "/" {
			t.Errorf("next to another site: Location %q", resp.Header.Get("Location"))
		}
	})
	t.Run("server-sent events stream", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "https://"+dev42+"/events", nil)
		resp := do(t, c, req)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		if line, _ := r.ReadString('\n'); line != "data: first\n" {
			t.Fatalf("first event %q", line)
		}
		close(app.sseSecond) // the device sends the second event only now: nothing was buffered
		r.ReadString('\n')
		if line, _ := r.ReadString('\n'); line != "data: second\n" {
			t.Fatalf("second event %q", line)
		}
	})
	t.Run("websocket echo", func(t *testing.T) {
		cfg, _ := websocket.NewConfig("wss://"+dev42+"/ws", "https://"+dev42)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(ca))
		cfg.TlsConfig = &tls.Config{RootCAs: pool, ServerName: dev42, NextProtos: []string{"http/1.1"}}
		cfg.Header = http.Header{"Authorization": {"Bearer " + token}}
		cfg.Dialer = &net.Dialer{}
		raw, err := tls.Dial("tcp", h.front, cfg.TlsConfig)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := websocket.NewClient(cfg, raw)
		if err != nil {
			t.Fatalf("websocket handshake through the front door: %v", err)
		}
		defer ws.Close()
		for _, msg := range []string{"hello", strings.Repeat("z", 70000)} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Fatalf("echo: %v, %d bytes back for %d", err, len(got), len(msg))
			}
		}
	})
	t.Run("failed logins are rate limited", func(t *testing.T) {
		// From a second loopback address, so the other subtests' address is not blocked.
		for i := 0; i < 3; i++ {
			if _, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.5", "-u", "bob:wrong-password"); code != 401 {
				t.Fatalf("attempt %d: %d", i+1, code)
			}
		}
		body, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.5", "-D", "-", "-u", "bob:bob-password-22")
		if code != 429 || !strings.Contains(strings.ToLower(body), "retry-after: 300") {
			t.Fatalf("after 3 failures, even the right password: %d %q", code, body)
		}
		// The account is held too, from any address; other accounts are not.
		if _, code, _ := fdCurl(t, h, caFile, dev42, "-u", "bob:bob-password-22"); code != 429 {
			t.Fatalf("bob from another address: %d", code)
		}
		if _, code, _ := fdCurl(t, h, caFile, dev42, "-u", "alice:alice-password-1"); code != 200 {
			t.Fatalf("alice: %d", code)
		}
		// Bob's failures from that address hold neither another account nor a valid token
		// used from it.
		if _, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.5", "-u", "alice:alice-password-1"); code != 200 {
			t.Fatalf("alice from bob's address: %d", code)
		}
		if _, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.5", "-H", "Authorization: Bearer "+token); code != 200 {
			t.Fatalf("a valid token from bob's address: %d", code)
		}
		// A password typed into the name field is not kept in the access log.
		if _, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.9", "-u", "Typed-Pa55word-In-Name:x"); code != 401 {
			t.Fatalf("unknown name: %d", code)
		}
		sum := sha256.Sum256([]byte("Typed-Pa55word-In-Name"))
		h.log.wait(t, "access", "user", "unknown:"+hex.EncodeToString(sum[:4]), "status", "401")
		if strings.Contains(h.log.text(), "Typed-Pa55word-In-Name") {
			t.Fatal("a name that is no account (perhaps a password) reached the hub's log")
		}
	})
	t.Run("account removed ends its sessions", func(t *testing.T) {
		h.mustCLI("account", "remove", "alice")
		req, _ := http.NewRequest("GET", "https://"+dev42+"/", nil)
		if resp := do(t, c, req); resp.StatusCode != 401 {
			t.Fatalf("session of a removed account: %d", resp.StatusCode)
		}
		if _, code, _ := fdCurl(t, h, caFile, dev42, "--interface", "127.0.0.7", "-H", "Authorization: Bearer "+token); code != 401 {
			t.Fatalf("token of a removed account: %d", code)
		}
	})
	t.Run("access log", func(t *testing.T) {
		h.log.wait(t, "access", "user", "alice", "device", "dev42", "alias", "http", "method", "GET", "status", "200")
		h.log.wait(t, "access", "user", "alice", "device", "dev42", "alias", "cam", "status", "403")
		h.log.wait(t, "access", "user", "bob", "status", "429")
		if strings.Contains(h.log.text(), "alice-password-1") || strings.Contains(h.log.text(), token) {
			t.Fatal("a password or token reached the hub's log")
		}
	})
}

// SIGHUP changes the front door's request limits on the running hub; settings that need
// a restart are named in a warning and the running ones stay.
func TestFrontdoorReloadsLimits(t *testing.T) {
	h := startHub(t, "", "frontdoor:\n  listen: 127.0.0.1:0\n  domain: "+fdDomain+"\n  routes:\n    - {alias: upload, max_body: 1KiB}\n")
	prof := filepath.Join(h.data, "web.yaml")
	os.WriteFile(prof, []byte("name: web\nreverse: {upload: 81}\n"), 0o600)
	key := h.addDevice("dev42", "--profile", prof)
	app := newFrontdoorApp(t)
	a := startAgent(t, h, key, "--expose", "upload="+hostPortOf(app.srv))
	a.stderr.wait(t, "session up")
	h.addAccount("alice", "alice-password-1")
	h.mustCLI("grant", "--account", "alice", "dev42", "upload")
	caFile := filepath.Join(h.data, "exported-ca.crt")
	os.WriteFile(caFile, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	upload := func() (string, int) {
		t.Helper()
		body, code, _ := fdCurl(t, h, caFile, "upload.dev42."+fdDomain, "-u", "alice:alice-password-1", "--data-binary", strings.Repeat("x", 2000), "/upload")
		return body, code
	}
	if body, code := upload(); code != 413 {
		t.Fatalf("2000 bytes over a 1 KiB limit: %d %q", code, body)
	}

	cfg, _ := os.ReadFile(h.config)
	changed := strings.Replace(string(cfg), "max_body: 1KiB", "max_body: 4KiB", 1)
	changed = strings.Replace(changed, "  domain: ", "  session_ttl: 1h\n  domain: ", 1)
	os.WriteFile(h.config, []byte(changed), 0o600)
	h.cmd.Process.Signal(syscall.SIGHUP)
	h.log.wait(t, "front door limits reloaded (max_body, response_timeout, routes)")
	h.log.wait(t, "front door settings changed that take effect only at a restart; the running ones stay", "settings", "session_ttl")
	if body, code := upload(); code != 200 || !strings.Contains(body, "got 2000 bytes") {
		t.Fatalf("2000 bytes after raising the limit to 4 KiB: %d %q", code, body)
	}

	// A broken front-door section is refused as a whole; the limits in force stay.
	os.WriteFile(h.config, []byte(strings.Replace(changed, "max_body: 4KiB", "max_body: lots", 1)), 0o600)
	h.cmd.Process.Signal(syscall.SIGHUP)
	h.log.wait(t, "reload refused; keeping the running configuration")
	if body, code := upload(); code != 200 {
		t.Fatalf("after a refused reload: %d %q", code, body)
	}
}

// fdSessionCookie is the front door's login session cookie.
const fdSessionCookie = "iotsafe_session"

// A login-page session outlives a hub restart (it is in the registry, as a hash only);
// logging out ends it for good, and a password change ends the account's sessions.
func TestFrontdoorLoginSessionSurvivesRestart(t *testing.T) {
	h := startHub(t, "", "frontdoor:\n  listen: 127.0.0.1:0\n  domain: "+fdDomain+"\n")
	h.addAccount("alice", "alice-password-1")
	ca := h.mustCLI("frontdoor", "ca")
	jar, _ := cookiejar.New(nil)
	c := fdClient(t, h, ca, jar)
	portal := "https://" + fdDomain + "/"
	// whoAmI asks the portal with cookie (the jar's when ""), and returns the status.
	whoAmI := func(cookie string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", portal, nil)
		req.Header.Set("Accept", "application/json")
		if cookie != "" {
			req.Header.Set("Cookie", fdSessionCookie+"="+cookie)
			resp, err := fdClient(t, h, ca, nil).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		resp := do(t, c, req)
		if body := readBody(t, resp); resp.StatusCode == 200 && !strings.Contains(body, `"account":"alice"`) {
			t.Fatalf("portal answered for someone else: %s", body)
		}
		return resp.StatusCode
	}
	login := func() string {
		t.Helper()
		resp, err := c.PostForm(portal+"login", url.Values{"user": {"alice"}, "password": {"alice-password-1"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, ck := range resp.Cookies() {
			if ck.Name == fdSessionCookie && ck.Value != "" {
				return ck.Value
			}
		}
		t.Fatalf("login: %d without a session cookie", resp.StatusCode)
		return ""
	}
	restart := func() {
		t.Helper()
		h.stop()
		h.start()
	}

	cookie := login()
	if code := whoAmI(""); code != 200 {
		t.Fatalf("after login: %d", code)
	}
	restart()
	if code := whoAmI(""); code != 200 {
		t.Fatalf("after a hub restart the login session is gone: %d", code)
	}
	// The registry holds a hash of the cookie, never the cookie.
	files, _ := filepath.Glob(filepath.Join(h.data, "*.db*"))
	if len(files) == 0 {
		t.Fatalf("no registry database in %s", h.data)
	}
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), cookie) {
			t.Fatalf("%s holds the session cookie in the clear", f)
		}
	}

	// Logout ends the session, also across a restart.
	req, _ := http.NewRequest("POST", portal+"logout", nil)
	if resp := do(t, c, req); resp.StatusCode != 303 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if code := whoAmI(cookie); code != 401 {
		t.Fatalf("cookie after logout: %d", code)
	}
	restart()
	if code := whoAmI(cookie); code != 401 {
		t.Fatalf("cookie after logout and a restart: %d", code)
	}

	// A password change ends the account's sessions at once, with the hub running.
	cookie = login()
	if code := whoAmI(cookie); code != 200 {
		t.Fatalf("second login: %d", code)
	}
	cmd := exec.Command(iotsafeBin, "account", "passwd", "alice", "--password-stdin", "--data", h.data)
	cmd.Stdin = strings.NewReader("alice-password-2\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("account passwd: %v\n%s", err, out)
	}
	if code := whoAmI(cookie); code != 401 {
		t.Fatalf("session after a password change: %d", code)
	}
	if out := h.mustCLI("events", "--kind", "account_password"); !strings.Contains(out, "1 login session(s) ended") {
		t.Fatalf("password change event does not say the session ended:\n%s", out)
	}

	// The operator ends a person's sessions without touching the password.
	resp, err := c.PostForm(portal+"login", url.Values{"user": {"alice"}, "password": {"alice-password-2"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code := whoAmI(""); code != 200 {
		t.Fatalf("login with the new password: %d", code)
	}
	if out := h.mustCLI("account", "list"); !regexp.MustCompile(`(?m)^alice +set +0 +1 `).MatchString(out) {
		t.Fatalf("account list does not show alice's one session:\n%s", out)
	}
	if out := h.mustCLI("account", "logout", "alice"); !strings.Contains(out, "1 login session(s) of alice ended") {
		t.Fatalf("account logout: %s", out)
	}
	if code := whoAmI(""); code != 401 {
		t.Fatalf("session after 'account logout': %d", code)
	}
	if out, err := h.cli("account", "logout", "nobody"); err == nil || !strings.Contains(out, `account "nobody"`) {
		t.Fatalf("logout of an unknown account: %v %s", err, out)
	}
}

// addAccount creates a front-door account with a password given on standard input.
func (h *hubProc) addAccount(name, pw string) {
	h.t.Helper()
	cmd := exec.Command(iotsafeBin, "account", "add", name, "--password-stdin", "--data", h.data)
	cmd.Stdin = strings.NewReader(pw + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		h.t.Fatalf("account add %s: %v\n%s", name, err, out)
	}
}

func do(t *testing.T, c *http.Client, req *http.Request) *http.Response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

// With the kernel layer on, the front door still reaches the device (it dials as the hub)
// and opens no way around the local rules: a local user without a grant who holds a
// front-door account gets the device through the front door, with the account's
// permission, and is still refused by the kernel on the protected socket itself.
func TestFrontdoorWithKernelLayer(t *testing.T) {
	ns := netns(t)
	h := startHubWith(t, "", "access: {kernel: on}\nfrontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n", inNetnsWithUserDB(ns))
	reachable(t, h.data)
	h.log.wait(t, "kernel layer on")
	deviceInNetns(t, h, ns, "dev42", "sensor 42 behind the front door")
	h.addAccount("alice", "alice-password-1")
	h.mustCLI("grant", "--account", "alice", "dev42", "http")
	caFile := filepath.Join(h.data, "ca.crt")
	os.WriteFile(caFile, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	host := "dev42." + fdDomain
	out, err := exec.Command("ip", "netns", "exec", ns, "setpriv", "--reuid=1003", "--regid=1003", "--clear-groups",
		"curl", "-sS", "--fail", "--max-time", "20", "--cacert", caFile, "--resolve", host+":"+portOf(h.front)+":127.0.0.1",
		"-u", "alice:alice-password-1", "https://"+host+":"+portOf(h.front)+"/").CombinedOutput()
	if err != nil || string(out) != "sensor 42 behind the front door" {
		t.Fatalf("through the front door with the kernel layer on: %v %s", err, out)
	}
	if out, err := curlIn(t, ns, 1003, 1003, "", "http://"+h.socket("dev42", "http")+"/"); err == nil || !strings.Contains(out, "Failed to connect") {
		t.Fatalf("the same uid straight to the protected socket: want refused by the kernel, got %v %s", err, out)
	}
}

// The front door takes its TLS policy from frontdoor.tls (package tlspolicy), checked with
// real clients: by default no CBC-SHA1 suite (Go's own default would accept
// ECDHE-ECDSA-AES128-SHA); an X25519-only listener refuses a client offering only P-256;
// a weak suite is offered only with allow_insecure, and the hub warns about it.
func TestFrontdoorTLSPolicy(t *testing.T) {
	h := startHub(t, "", "frontdoor:\n  listen: 127.0.0.1:0\n  domain: "+fdDomain+"\n  tls: {groups: [X25519]}\n")
	ca := filepath.Join(h.data, "exported-ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	tlsCurl := func(h *hubProc, args ...string) error {
		_, port, _ := net.SplitHostPort(h.front)
		all := append([]string{"-sS", "-o", "/dev/null", "--max-time", "20", "--cacert", ca, "--resolve", fdDomain + ":" + port + ":127.0.0.1"}, args...)
		return exec.Command(needTool(t, "curl"), append(all, "https://"+fdDomain+":"+port+"/")...).Run()
	}
	if err := tlsCurl(h, "--tls-max", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256"); err != nil {
		t.Fatalf("an AEAD suite was refused: %v", err)
	}
	if err := tlsCurl(h, "--tls-max", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-SHA"); err == nil {
		t.Fatal("the front door accepted ECDHE-ECDSA-AES128-SHA by default")
	}
	// HSTS by default: browsers never try the front door's names over plain HTTP.
	_, port, _ := net.SplitHostPort(h.front)
	hdr, err := exec.Command(needTool(t, "curl"), "-sS", "-D", "-", "-o", "/dev/null", "--cacert", ca, "--resolve", fdDomain+":"+port+":127.0.0.1",
		"https://"+fdDomain+":"+port+"/").Output()
	if err != nil || !strings.Contains(strings.ToLower(string(hdr)), "strict-transport-security: max-age=31536000; includesubdomains") {
		t.Fatalf("no HSTS header (%v):\n%s", err, hdr)
	}
	sClient := func(h *hubProc, groups string) bool {
		cmd := exec.Command(needTool(t, "openssl"), "s_client", "-connect", h.front, "-servername", fdDomain, "-brief", "-groups", groups)
		cmd.Stdin = strings.NewReader("")
		out, _ := cmd.CombinedOutput()
		return strings.Contains(string(out), "CONNECTION ESTABLISHED")
	}
	if !sClient(h, "X25519") || sClient(h, "P-256") {
		t.Fatal("groups [X25519]: X25519 must connect and P-256 alone must not")
	}
	h.stop()

	weak := startHub(t, "", "frontdoor:\n  listen: 127.0.0.1:0\n  domain: "+fdDomain+"\n  tls: {suites: [ECDHE-ECDSA-AES128-SHA, ECDHE-ECDSA-AES128-GCM-SHA256], allow_insecure: true}\n")
	weak.log.waitText(t, "insecure algorithm enabled by frontdoor.tls.allow_insecure")
	os.WriteFile(ca, []byte(weak.mustCLI("frontdoor", "ca")), 0o644)
	// HTTP/1.1: HTTP/2 forbids CBC suites (RFC 7540, 9.2.2), and Go's server says so.
	if err := tlsCurl(weak, "--http1.1", "--tls-max", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-SHA"); err != nil {
		t.Fatalf("allow_insecure with the suite listed: %v", err)
	}
}
