package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// restCall sends one JSON request and returns the status and decoded body.
func restCall(t *testing.T, c *http.Client, method, url, auth string, body any) (int, map[string]any, []any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, url, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var obj map[string]any
	var arr []any
	if json.Unmarshal(raw, &obj) != nil {
		json.Unmarshal(raw, &arr)
	}
	return resp.StatusCode, obj, arr
}

// The telemetry path of paper 004 end to end: device secrets and tokens from the CLI,
// logins, refresh, notifications stored and read back over the front door's HTTPS, every
// refusal a device or app can meet, grants, revocation taking effect at once, and the
// plain listener that knows a device by the pool address of its SSH forward.
func TestTelemetryREST(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nrest: {listen: '127.0.0.1:0', max_body: 4KiB}\n")
	if h.rest == "" || h.front == "" {
		t.Fatalf("hub printed no REST or front door address; log:\n%s", h.log.text())
	}
	if fi, err := os.Stat(filepath.Join(h.data, "jwt-keys.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing keys: %v", err)
	}
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\ndirect: {api: %q}\n", h.rest))
	h.addDevice("dev1")
	h.addDevice("dev2")
	key3 := h.addDevice("dev3", "--profile", prof)
	h.addDevice("dev4")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	refresh2 := strings.TrimSpace(h.mustCLIStdout("device", "token", "dev2", "--expires", "1h"))
	if out, err := h.cli("device", "secret", "rotate", "nodev"); err == nil || !strings.Contains(out, "enroll it first") {
		t.Fatalf("secret for an unknown device: %v %s", err, out)
	}
	h.addAccount("app", "app-password-1")
	h.addAccount("mgr", "mgr-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	h.mustCLI("grant", "--account", "mgr", "dev2", "+manage")
	h.mustCLI("grant", "--account", "app", "dev2", "*") // services, not telemetry
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"

	code, info, _ := restCall(t, c, "GET", api+"/info", "", nil)
	if code != 200 || info["apiVersion"] == nil || info["serverTimestamp"] == nil {
		t.Fatalf("info: %d %v", code, info)
	}
	// Device login with its secret; a wrong one is refused with DeviceHive's error body.
	code, body, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": secret + "x"})
	if code != 401 || body["message"] != "wrong login or password" || body["error"] != float64(401) {
		t.Fatalf("wrong secret: %d %v", code, body)
	}
	code, toks, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": secret})
	if code != 201 || toks["accessToken"] == nil || toks["refreshToken"] == nil {
		t.Fatalf("login: %d %v", code, toks)
	}
	access1, refresh1 := "Bearer "+toks["accessToken"].(string), toks["refreshToken"].(string)

	var firstID float64
	t.Run("store and read back", func(t *testing.T) {
		code, got, _ := restCall(t, c, "POST", api+"/device/dev1/notification", access1,
			map[string]any{"notification": "temperature", "parameters": map[string]any{"c": 21.5}})
		if code != 201 || got["id"] == nil || got["timestamp"] == nil {
			t.Fatalf("insert: %d %v", code, got)
		}
		firstID = got["id"].(float64)
		code, _, list := restCall(t, c, "GET", api+"/device/dev1/notification", access1, nil)
		if code != 200 || len(list) != 1 || list[0].(map[string]any)["notification"] != "temperature" ||
			list[0].(map[string]any)["parameters"].(map[string]any)["c"] != 21.5 {
			t.Fatalf("list: %d %v", code, list)
		}
		code, one, _ := restCall(t, c, "GET", fmt.Sprintf("%s/device/dev1/notification/%d", api, int64(firstID)), access1, nil)
		if code != 200 || one["deviceId"] != "dev1" {
			t.Fatalf("get: %d %v", code, one)
		}
		// The front door's access log names the device its token belongs to.
		h.log.wait(t, "access", "device", "dev1", "method", "POST", "status", "201")
	})
	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name, method, path, auth string
			body                     any
			code                     int
			msg                      string
		}{
			{"another device's notifications", "POST", "/device/dev2/notification", access1, map[string]any{"notification": "x"}, 403, "only its own"},
			{"no credentials", "POST", "/device/dev1/notification", "", map[string]any{"notification": "x"}, 401, "log in"},
			{"refresh token on the API", "GET", "/device/dev1", "Bearer " + refresh1, nil, 401, "a refresh token cannot call the API"},
			{"malformed JSON", "POST", "/device/dev1/notification", access1, `{"notification": "x"`, 400, "malformed JSON"},
			{"no name", "POST", "/device/dev1/notification", access1, map[string]any{"parameters": 1}, 400, "notification"},
			{"body over the limit", "POST", "/device/dev1/notification", access1, map[string]any{"notification": "x", "parameters": strings.Repeat("a", 5000)}, 413, "larger than"},
			{"unknown device", "GET", "/device/nodev/notification", access1, nil, 404, "not found"},
			{"unknown call", "GET", "/configuration/x", access1, nil, 404, "no such API call"},
			{"bad timestamp", "GET", "/device/dev1/notification/poll?timestamp=yesterday", access1, nil, 400, "timestamp"},
		} {
			code, body, _ := restCall(t, c, tc.method, api+tc.path, tc.auth, tc.body)
			if code != tc.code || !strings.Contains(fmt.Sprint(body["message"]), tc.msg) {
				t.Errorf("%s: %d %v, want %d with %q", tc.name, code, body, tc.code, tc.msg)
			}
		}
		// An access token cannot refresh.
		code, body, _ := restCall(t, c, "POST", api+"/token/refresh", "", map[string]string{"refreshToken": strings.TrimPrefix(access1, "Bearer ")})
		if code != 401 || !strings.Contains(fmt.Sprint(body["message"]), "access token cannot refresh") {
			t.Errorf("access token at refresh: %d %v", code, body)
		}
		// A tampered token (another device in the payload) is refused and audited.
		parts := strings.Split(strings.TrimPrefix(access1, "Bearer "), ".")
		payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
		forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte("dev1"), []byte("dev4"), 1)) + "." + parts[2]
		code, body, _ = restCall(t, c, "POST", api+"/device/dev4/notification", "Bearer "+forged, map[string]any{"notification": "x"})
		if code != 401 || body["message"] != "invalid token" {
			t.Errorf("tampered token: %d %v", code, body)
		}
		if len(h.events("", "telemetry_auth_refused")) == 0 {
			t.Error("a tampered token left no audit event")
		}
		// Nothing refused was stored.
		_, _, list := restCall(t, c, "GET", api+"/device/dev1/notification", access1, nil)
		if len(list) != 1 {
			t.Errorf("dev1 has %d notifications after the refusals, want 1", len(list))
		}
	})
	t.Run("refresh and grants", func(t *testing.T) {
		code, got, _ := restCall(t, c, "POST", api+"/token/refresh", "", map[string]string{"refreshToken": refresh2})
		if code != 201 || got["accessToken"] == nil {
			t.Fatalf("refresh of the CLI's token: %d %v", code, got)
		}
		access2 := "Bearer " + got["accessToken"].(string)
		if code, _, _ := restCall(t, c, "POST", api+"/device/dev2/notification", access2, map[string]any{"notification": "door", "parameters": "open"}); code != 201 {
			t.Fatalf("dev2 insert: %d", code)
		}
		basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
		app := basic("app", "app-password-1")
		// app reads dev1 (+telemetry); dev2 is only '*' (services), so it is hidden.
		if code, _, list := restCall(t, c, "GET", api+"/device/dev1/notification", app, nil); code != 200 || len(list) != 1 {
			t.Errorf("app reads dev1: %d %v", code, list)
		}
		if code, _, _ := restCall(t, c, "GET", api+"/device/dev2/notification", app, nil); code != 404 {
			t.Errorf("app reads dev2 with only '*': %d, want 404", code)
		}
		if code, _, _ := restCall(t, c, "POST", api+"/device/dev1/notification", app, map[string]any{"notification": "x"}); code != 403 {
			t.Errorf("an account wrote a notification: %d", code)
		}
		// Long poll from a cursor: returns what came after it, at once.
		code, _, polled := restCall(t, c, "GET", api+"/device/notification/poll?waitTimeout=5&timestamp=2000-01-01T00:00:00", app, nil)
		if code != 200 || len(polled) != 1 || polled[0].(map[string]any)["deviceId"] != "dev1" {
			t.Errorf("poll over app's devices: %d %v", code, polled)
		}
		// mgr provisions dev2's tokens; it may not for dev1.
		mgr := basic("mgr", "mgr-password-1")
		if code, got, _ := restCall(t, c, "POST", api+"/token/create", mgr, map[string]any{"deviceIds": []string{"dev2"}}); code != 201 || got["refreshToken"] == nil {
			t.Errorf("token/create by +manage: %d %v", code, got)
		}
		if code, _, _ := restCall(t, c, "POST", api+"/token/create", mgr, map[string]any{"deviceIds": []string{"dev1"}}); code != 404 {
			t.Errorf("token/create for a device mgr cannot see: %d", code)
		}
		if code, _, _ := restCall(t, c, "POST", api+"/token/create", app, map[string]any{"deviceIds": []string{"dev1"}}); code != 403 {
			t.Errorf("token/create with only +telemetry: %d", code)
		}
		// mgr removes dev2 over the API: its tokens and notifications go with it.
		if code, _, _ := restCall(t, c, "DELETE", api+"/device/dev2", mgr, nil); code != 204 {
			t.Fatalf("delete by +manage: %d", code)
		}
		if code, body, _ := restCall(t, c, "POST", api+"/token/refresh", "", map[string]string{"refreshToken": refresh2}); code != 401 || !strings.Contains(fmt.Sprint(body["message"]), "no longer exists") {
			t.Errorf("refresh token of a removed device: %d %v", code, body)
		}
	})
	t.Run("over the SSH path, known by pool address", func(t *testing.T) {
		fwd := freePort(t)
		a := startAgent(t, h, key3, "--forward", fwd+"=api")
		a.stderr.wait(t, "session up")
		plain := &http.Client{Timeout: 30 * time.Second}
		code, got, _ := restCall(t, plain, "POST", "http://"+fwd+"/api/rest/device/dev3/notification", "", map[string]any{"notification": "hello"})
		if code != 201 {
			t.Fatalf("dev3 without a token over its forward: %d %v", code, got)
		}
		if code, _, _ := restCall(t, plain, "POST", "http://"+fwd+"/api/rest/device/dev4/notification", "", map[string]any{"notification": "x"}); code != 403 {
			t.Errorf("dev3 wrote as dev4: %d", code)
		}
		// A local process that is not a device's forward has no identity there.
		if code, _, _ := restCall(t, plain, "POST", "http://"+h.rest+"/api/rest/device/dev3/notification", "", map[string]any{"notification": "x"}); code != 401 {
			t.Errorf("a local process without a token: %d", code)
		}
		// The CLI's curl-able example works: the device reads its own.
		out, err := exec.Command(needTool(t, "curl"), "-sS", "http://"+fwd+"/api/rest/device/dev3/notification").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"notification":"hello"`) {
			t.Errorf("curl over the forward: %v %s", err, out)
		}
	})
	t.Run("stream", func(t *testing.T) {
		// Server-sent events from a cursor: dev1's stored notification arrives as an event
		// whose id is its timestamp.
		req, _ := http.NewRequest("GET", api+"/device/notification/stream?deviceId=dev1&timestamp=2000-01-01T00:00:00", nil)
		req.SetBasicAuth("app", "app-password-1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		sc := bufio.NewScanner(resp.Body)
		var id string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if strings.HasPrefix(line, "data: ") {
				if !strings.Contains(line, `"notification":"temperature"`) || id == "" {
					t.Fatalf("stream event: id %q, %s", id, line)
				}
				return
			}
		}
		t.Fatalf("stream ended without an event: %v", sc.Err())
	})
	t.Run("revocation stops tokens at once", func(t *testing.T) {
		h.mustCLI("device", "revoke", "dev1")
		code, body, _ := restCall(t, c, "POST", api+"/device/dev1/notification", access1, map[string]any{"notification": "late"})
		if code != 401 || !strings.Contains(fmt.Sprint(body["message"]), "revoked") {
			t.Fatalf("revoked device's access token: %d %v", code, body)
		}
		if code, _, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": "dev1", "password": secret}); code != 401 {
			t.Fatalf("revoked device's login: %d", code)
		}
	})
	_ = firstID
}

// The DeviceHive Python client library (PyPI 'devicehive', installed by scripts/setup.sh)
// works against the hub unchanged: it refreshes its token, reads the device, sends
// notifications, lists them and polls for them; an app sends a command, which the
// device's client answers.
func TestDeviceHiveClient(t *testing.T) {
	py := venvTool(t, "python")
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	h.addDevice("dh1")
	refresh := strings.TrimSpace(h.mustCLIStdout("device", "token", "dh1"))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	script := `
import socket, sys
real = socket.getaddrinfo
def resolve(host, *a, **k):  # the front door's name, without DNS
    return real("127.0.0.1" if host == sys.argv[2] else host, *a, **k)
socket.getaddrinfo = resolve
from devicehive import DeviceHiveApi
api = DeviceHiveApi(sys.argv[1], refresh_token=sys.argv[3])
info = api.get_info()
assert info["api_version"], info
dev = api.get_device("dh1")
assert dev.id == "dh1" and dev.is_blocked is False, dev
n = dev.send_notification("temperature", parameters={"c": 22})
assert n.id > 0, n
dev.send_notification("humidity", parameters={"rh": 40})
got = dev.list_notifications(sort_order="ASC")
assert [x.notification for x in got] == ["temperature", "humidity"], [x.notification for x in got]
only = dev.list_notifications(notification="humidity")
assert len(only) == 1 and only[0].parameters == {"rh": 40}, only
print("devicehive ok", n.id, len(got))
`
	cmd := exec.Command(py, "-c", script, "https://"+fdDomain+":"+portOf(h.front)+"/api/rest", fdDomain, refresh)
	cmd.Env = append(os.Environ(), "REQUESTS_CA_BUNDLE="+caFile)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "devicehive ok") {
		t.Fatalf("devicehive client: %v\n%s\nhub log:\n%s", err, out, h.log.text())
	}

	// Commands: an app logged in with an account's password sends one; the device's
	// client finds it, answers it with Command.save(); the app reads the answer.
	h.addAccount("ctl", "ctl-password-1")
	h.mustCLI("grant", "--account", "ctl", "dh1", "+command")
	commands := `
import socket, sys
real = socket.getaddrinfo
def resolve(host, *a, **k):
    return real("127.0.0.1" if host == sys.argv[2] else host, *a, **k)
socket.getaddrinfo = resolve
from devicehive import DeviceHiveApi
app = DeviceHiveApi(sys.argv[1], login="ctl", password="ctl-password-1")
sent = app.send_command("dh1", "open", parameters={"valve": 2}, lifetime=600)
assert sent.id > 0 and sent.timestamp and sent.user_id, vars(sent)
device = DeviceHiveApi(sys.argv[1], refresh_token=sys.argv[3]).get_device("dh1")
mine = [c for c in device.list_commands() if c.id == sent.id]
assert len(mine) == 1 and mine[0].command == "open" and mine[0].parameters == {"valve": 2}, mine
mine[0].status = "done"
mine[0].result = {"opened": True}
mine[0].save()
back = [c for c in app.list_commands("dh1") if c.id == sent.id][0]
assert back.status == "done" and back.result == {"opened": True}, vars(back)
print("devicehive commands ok", sent.id)
`
	cmd = exec.Command(py, "-c", commands, "https://"+fdDomain+":"+portOf(h.front)+"/api/rest", fdDomain, refresh)
	cmd.Env = append(os.Environ(), "REQUESTS_CA_BUNDLE="+caFile)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "devicehive commands ok") {
		t.Fatalf("devicehive client, commands: %v\n%s\nhub log:\n%s", err, out, h.log.text())
	}
}
