package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func basicAuth(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

// Commands end to end: a platform app with +command sends one over the front door's
// HTTPS; the device, over its SSH session with no token, long-polls for it, answers
// it; the app's poll for the answer returns it; every app without the right, and every
// malformed request, is refused with DeviceHive's error body; the audit log names who
// sent what.
func TestCommands(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nrest: {listen: '127.0.0.1:0', max_body: 4KiB}\n")
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: actuator\ndirect: {api: %q}\n", h.rest))
	key := h.addDevice("dev1", "--profile", prof)
	h.addDevice("dev2")
	h.addAccount("ctl", "ctl-password-1")
	h.addAccount("viewer", "viewer-password-1")
	h.mustCLI("grant", "--account", "ctl", "dev1", "+command")
	h.mustCLI("grant", "--account", "viewer", "dev1", "+telemetry")
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	ctl, viewer := basicAuth("ctl", "ctl-password-1"), basicAuth("viewer", "viewer-password-1")

	for _, tc := range []struct {
		name, path, auth string
		body             any
		code             int
		says             string
	}{
		{"reading is not commanding", "/device/dev1/command", viewer, map[string]any{"command": "open"}, 403, "+command"},
		{"a device the app may not see", "/device/dev2/command", ctl, map[string]any{"command": "open"}, 404, "not found"},
		{"no such device", "/device/nosuch/command", ctl, map[string]any{"command": "open"}, 404, "not found"},
		{"no name", "/device/dev1/command", ctl, map[string]any{"parameters": map[string]any{"a": 1}}, 400, `"command"`},
		{"malformed JSON", "/device/dev1/command", ctl, `{"command":`, 400, "malformed JSON"},
		{"negative lifetime", "/device/dev1/command", ctl, map[string]any{"command": "open", "lifetime": -5}, 400, "lifetime"},
		{"over the body limit", "/device/dev1/command", ctl, map[string]any{"command": "open", "parameters": strings.Repeat("x", 5000)}, 413, "larger than"},
		{"no credentials", "/device/dev1/command", "", map[string]any{"command": "open"}, 401, "log in"},
	} {
		code, body, _ := restCall(t, c, "POST", api+tc.path, tc.auth, tc.body)
		if code != tc.code || body["error"] != float64(tc.code) || !strings.Contains(fmt.Sprint(body["message"]), tc.says) {
			t.Errorf("%s: %d %v; want %d saying %q", tc.name, code, body, tc.code, tc.says)
		}
	}

	// The device side: over its forward to the plain listener, known by its pool
	// address. Its poll starts from the hub's time before the command is sent, so it
	// returns the command whether it starts before or after.
	fwd := freePort(t)
	a := startAgent(t, h, key, "--forward", fwd+"=api")
	a.stderr.wait(t, "session up")
	plain := &http.Client{Timeout: 60 * time.Second}
	dev := "http://" + fwd + "/api/rest"
	_, info, _ := restCall(t, plain, "GET", dev+"/info", "", nil)
	since := url.QueryEscape(fmt.Sprint(info["serverTimestamp"]))
	polled := make(chan []any, 1)
	go func() {
		_, _, got := restCall(t, plain, "GET", dev+"/device/dev1/command/poll?waitTimeout=30&timestamp="+since, "", nil)
		polled <- got
	}()
	code, sent, _ := restCall(t, c, "POST", api+"/device/dev1/command", ctl, map[string]any{"command": "open", "parameters": map[string]any{"valve": 2}, "lifetime": 600})
	if code != 201 || sent["id"] == nil || sent["lastUpdated"] == nil || sent["userId"] == nil {
		t.Fatalf("send: %d %v", code, sent)
	}
	id := int64(sent["id"].(float64))
	got := <-polled
	if len(got) != 1 || got[0].(map[string]any)["command"] != "open" || got[0].(map[string]any)["parameters"].(map[string]any)["valve"] != float64(2) {
		t.Fatalf("the device's poll: %v", got)
	}
	answered := make(chan map[string]any, 1)
	go func() {
		_, one, _ := restCall(t, c, "GET", fmt.Sprintf("%s/device/dev1/command/%d/poll?waitTimeout=30", api, id), ctl, nil)
		answered <- one
	}()
	if code, body, _ := restCall(t, plain, "PUT", fmt.Sprintf("%s/device/dev2/command/%d", dev, id), "", map[string]any{"status": "done"}); code != 404 {
		t.Errorf("dev1 answering on dev2's path: %d %v", code, body)
	}
	if code, body, _ := restCall(t, plain, "PUT", fmt.Sprintf("%s/device/dev1/command/%d", dev, id), "", map[string]any{"status": "done", "result": map[string]any{"opened": true}}); code != 204 {
		t.Fatalf("the device's answer: %d %v", code, body)
	}
	if one := <-answered; one["status"] != "done" || one["result"].(map[string]any)["opened"] != true {
		t.Fatalf("the app's poll for the answer: %v", one)
	}
	// A reader sees the command and its answer, and cannot change it.
	code, _, list := restCall(t, c, "GET", api+"/device/dev1/command?status=done", viewer, nil)
	if code != 200 || len(list) != 1 || list[0].(map[string]any)["id"] != float64(id) {
		t.Fatalf("viewer's list: %d %v", code, list)
	}
	if code, _, _ := restCall(t, c, "PUT", fmt.Sprintf("%s/device/dev1/command/%d", api, id), viewer, map[string]any{"status": "forged"}); code != 403 {
		t.Errorf("viewer changing a command: %d", code)
	}
	if out := h.mustCLI("events", "--device", "dev1", "--kind", "command_sent"); !strings.Contains(out, `account ctl sent command "open"`) {
		t.Errorf("audit log: %s", out)
	}
}
