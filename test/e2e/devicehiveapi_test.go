package e2e

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// DeviceHive's /user/current and /info as its clients read them (issue 53.4), and its
// network and device-type filters applied where it takes them and refused with 400
// elsewhere, never ignored (issue 53.3: GET /device?networkId=999 listed every device).
func TestDeviceHiveUserInfoAndFilters(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	login := func(user, pw string) string {
		code, toks, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": user, "password": pw})
		if code != 201 {
			t.Fatalf("login %s: %d %v", user, code, toks)
		}
		return "Bearer " + toks["accessToken"].(string)
	}
	app, dev := login("app", "app-password-1"), login("dev1", secret)
	if code, u, _ := restCall(t, c, "GET", api+"/user/current", app, nil); code != 200 || u["login"] != "app" || u["id"] == nil {
		t.Fatalf("/user/current as the account: %d %v", code, u)
	}
	// A user's token as DeviceHive's create_token(user_id) asks for it: an account's for
	// itself, which reaches what its grants allow; another account's is refused.
	_, u, _ := restCall(t, c, "GET", api+"/user/current", app, nil)
	code, toks, _ := restCall(t, c, "POST", api+"/token/create", app, map[string]any{"userId": u["id"]})
	if code != 201 || toks["accessToken"] == nil || toks["refreshToken"] == nil {
		t.Fatalf("create_token(user_id) for itself: %d %v", code, toks)
	}
	if code, _, list := restCall(t, c, "GET", api+"/device", "Bearer "+toks["accessToken"].(string), nil); code != 200 || len(list) != 1 {
		t.Fatalf("the created token: %d %v", code, list)
	}
	if code, e, _ := restCall(t, c, "POST", api+"/token/create", app, map[string]any{"userId": 4242}); code != 403 || !strings.Contains(e["message"].(string), "iotsafe account token NAME") {
		t.Fatalf("create_token for another user: %d %v", code, e)
	}
	if code, u, _ := restCall(t, c, "GET", api+"/user/current", dev, nil); code != 403 {
		t.Fatalf("/user/current as a device: %d %v", code, u)
	}
	if code, info, _ := restCall(t, c, "GET", api+"/info", "", nil); code != 200 || info["restServerUrl"] != api {
		t.Fatalf("/info: %d %v", code, info)
	}
	// A group filter is applied where DeviceHive takes it, refused elsewhere.
	for _, q := range []string{"/device/dev1/notification?deviceTypeId=3", "/device/dev1?networkId=1", "/device/notification/poll?networkId=1&waitTimeout=0"} {
		code, e, _ := restCall(t, c, "GET", api+q, app, nil)
		if code != 400 || !strings.Contains(e["message"].(string), "is not supported on this call") {
			t.Errorf("GET %s: %d %v", q, code, e)
		}
	}
	if code, _, list := restCall(t, c, "GET", api+"/device?networkId=999", app, nil); code != 200 || len(list) != 0 {
		t.Errorf("GET /device?networkId=999 (no such network): %d %v", code, list)
	}
	if code, _, list := restCall(t, c, "GET", api+"/device", app, nil); code != 200 || len(list) != 1 {
		t.Fatalf("GET /device without a filter: %d %v", code, list)
	}
}

// Registration by the API (issue 53.2): an account with +manage on @all registers a
// device with PUT /device/{id} as DeviceHive's clients do; it is enrolled as 'iotsafe
// device add' enrolls one (audited with the account), with no SSH key yet; the account
// issues it tokens; it is given a key later and its agent comes up. Callers without the
// right, renames and networks are refused, and a removed device registered again is a
// new enrolment whose old tokens are refused.
func TestDeviceHiveRegistration(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	h.addDevice("dev1")
	h.addAccount("prov", "prov-password-1")
	h.addAccount("viewer", "viewer-password-1")
	h.mustCLI("grant", "--account", "prov", "@all", "+manage")
	h.mustCLI("grant", "--account", "viewer", "@all", "+telemetry")
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	prov, viewer := basicAuth("prov", "prov-password-1"), basicAuth("viewer", "viewer-password-1")
	// What DeviceHive's put_device sends.
	body := map[string]any{"id": "newdev", "name": "newdev", "data": map[string]any{"site": "a"}, "networkId": nil, "deviceTypeId": nil, "isBlocked": false}

	for _, tc := range []struct {
		what, auth, path string
		body             map[string]any
		code             int
		says             string
	}{
		{"an account without +manage", viewer, "/device/newdev", body, 404, "registered here by an account with +manage"},
		{"a rename", prov, "/device/newdev", map[string]any{"name": "other"}, 400, "name is its id"},
		{"an unknown network", prov, "/device/newdev", map[string]any{"networkId": 5}, 400, "network with id 5 not found"},
		{"a bad name", prov, "/device/New_Dev", map[string]any{}, 400, "lower-case"},
	} {
		code, e, _ := restCall(t, c, "PUT", api+tc.path, tc.auth, tc.body)
		if code != tc.code || !strings.Contains(fmt.Sprint(e["message"]), tc.says) {
			t.Errorf("%s: %d %v, want %d saying %q", tc.what, code, e, tc.code, tc.says)
		}
	}
	if code, e, _ := restCall(t, c, "PUT", api+"/device/newdev", prov, body); code != 204 {
		t.Fatalf("register: %d %v", code, e)
	}
	if code, d, _ := restCall(t, c, "GET", api+"/device/newdev", viewer, nil); code != 200 || d["data"].(map[string]any)["site"] != "a" {
		t.Fatalf("the registered device, read by another account: %d %v", code, d)
	}
	if d := h.device("newdev"); len(d.Keys) != 0 || d.Revoked != nil {
		t.Fatalf("the registered device in the registry: %+v", d)
	}
	if ev := h.mustCLI("events", "--device", "newdev", "--kind", "device_registered"); !strings.Contains(ev, "account prov") {
		t.Fatalf("the audit log names no account: %s", ev)
	}
	// Its tokens come from the account that registered it.
	code, toks, _ := restCall(t, c, "POST", api+"/token/create", prov, map[string]any{"deviceIds": []string{"newdev"}})
	if code != 201 {
		t.Fatalf("token/create for the new device: %d %v", code, toks)
	}
	dev := "Bearer " + toks["accessToken"].(string)
	if code, e, _ := restCall(t, c, "POST", api+"/device/newdev/notification", dev, map[string]any{"notification": "hello"}); code != 201 {
		t.Fatalf("the new device's first notification: %d %v", code, e)
	}
	if code, e, _ := restCall(t, c, "PUT", api+"/device/another", dev, map[string]any{}); code != 404 {
		t.Errorf("a device registering another: %d %v", code, e)
	}
	// An SSH key later: its agent comes up.
	keys := filepath.Join(h.data, "newkeys")
	h.mustCLI("device", "key", "add", "newdev", "--keygen", keys)
	matches, _ := filepath.Glob(filepath.Join(keys, "new-*", "newdev"))
	if len(matches) != 1 {
		t.Fatalf("the new key: %v", matches)
	}
	startAgent(t, h, matches[0], "--expose", "http=127.0.0.1:9").stderr.wait(t, "session up") // its default profile's alias

	// Removed and registered again: a new enrolment; the old device's token is refused.
	if code, e, _ := restCall(t, c, "DELETE", api+"/device/newdev", prov, nil); code != 204 {
		t.Fatalf("remove: %d %v", code, e)
	}
	if code, e, _ := restCall(t, c, "PUT", api+"/device/newdev", prov, body); code != 204 {
		t.Fatalf("register again: %d %v", code, e)
	}
	if code, e, _ := restCall(t, c, "POST", api+"/device/newdev/notification", dev, map[string]any{"notification": "stale"}); code != 401 {
		t.Fatalf("the earlier enrolment's token after re-registration: %d %v", code, e)
	}
}

// Networks and device types as device groups (issue 53.3): a team granted one network
// sees, registers into and is pushed only that network's devices; the operator's
// account with +manage on @all makes networks, moves devices between them and removes
// empty ones; filters select by network; grants name @network:NAME.
func TestDeviceHiveNetworks(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n")
	h.addDevice("dev1", "--group", "network:plant-a", "--group", "devicetype:thermo")
	h.addDevice("dev2", "--group", "network:plant-b")
	if out := h.mustCLIStdout("network", "add", "plant-c", "--description", "the third plant"); !strings.Contains(out, "id 3") {
		t.Fatalf("network add: %s", out)
	}
	if out := h.mustCLIStdout("network", "list"); !strings.Contains(out, "plant-a") || !strings.Contains(out, "@network:plant-c") {
		t.Fatalf("network list:\n%s", out)
	}
	h.addAccount("team-a", "team-a-password-1")
	h.addAccount("ops", "ops-password-1")
	h.mustCLI("grant", "--account", "team-a", "@network:plant-a", "+manage")
	h.mustCLI("grant", "--account", "ops", "@all", "+manage")
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	team, ops := basicAuth("team-a", "team-a-password-1"), basicAuth("ops", "ops-password-1")
	ids := func(list []any) []string {
		var out []string
		for _, d := range list {
			out = append(out, fmt.Sprint(d.(map[string]any)["id"]))
		}
		return out
	}

	if code, _, list := restCall(t, c, "GET", api+"/device", team, nil); code != 200 || fmt.Sprint(ids(list)) != "[dev1]" || list[0].(map[string]any)["networkId"] != 1.0 || list[0].(map[string]any)["deviceTypeId"] != 1.0 {
		t.Fatalf("team-a's devices: %d %v", code, list)
	}
	if code, _, list := restCall(t, c, "GET", api+"/network", team, nil); code != 200 || len(list) != 1 || list[0].(map[string]any)["name"] != "plant-a" {
		t.Fatalf("team-a's networks: %d %v", code, list)
	}
	if code, n, _ := restCall(t, c, "GET", api+"/network/3", ops, nil); code != 200 || n["description"] != "the third plant" {
		t.Fatalf("GET /network/3: %d %v", code, n)
	}
	if code, _, _ := restCall(t, c, "GET", api+"/network/2", team, nil); code != 404 {
		t.Fatalf("another team's network: %d", code)
	}
	// Registering: into its network, yes; elsewhere, or nowhere, as for a device it may
	// not see.
	if code, e, _ := restCall(t, c, "PUT", api+"/device/dev3", team, map[string]any{"networkId": 1}); code != 204 {
		t.Fatalf("team-a registers into its network: %d %v", code, e)
	}
	for _, body := range []map[string]any{{"networkId": 2}, {}} {
		if code, e, _ := restCall(t, c, "PUT", api+"/device/dev4", team, body); code != 404 {
			t.Errorf("team-a registers %v: %d %v", body, code, e)
		}
	}
	if code, e, _ := restCall(t, c, "PUT", api+"/device/dev5", ops, map[string]any{"networkId": 42}); code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "network with id 42 not found") {
		t.Errorf("an unknown network: %d %v", code, e)
	}
	if code, _, list := restCall(t, c, "GET", api+"/device?networkName=plant-a", ops, nil); code != 200 || fmt.Sprint(ids(list)) != "[dev1 dev3]" {
		t.Fatalf("by network name: %d %v", code, list)
	}
	// Making and removing networks is the whole fleet's business.
	if code, _, _ := restCall(t, c, "POST", api+"/network", team, map[string]any{"name": "plant-z"}); code != 403 {
		t.Errorf("team-a makes a network: %d", code)
	}
	if code, n, _ := restCall(t, c, "POST", api+"/devicetype", ops, map[string]any{"name": "valve", "description": "valves"}); code != 201 || n["id"] != 2.0 {
		t.Fatalf("ops makes a device type: %d %v", code, n)
	}
	// Moving: ops moves dev2 to plant-c; team-a may not move its device out.
	if code, e, _ := restCall(t, c, "PUT", api+"/device/dev2", ops, map[string]any{"networkId": 3, "deviceTypeId": 2}); code != 204 {
		t.Fatalf("ops moves dev2: %d %v", code, e)
	}
	if code, d, _ := restCall(t, c, "GET", api+"/device/dev2", ops, nil); code != 200 || d["networkId"] != 3.0 || d["deviceTypeId"] != 2.0 {
		t.Fatalf("dev2 after the move: %d %v", code, d)
	}
	if code, e, _ := restCall(t, c, "PUT", api+"/device/dev1", team, map[string]any{"networkId": 3}); code != 403 {
		t.Errorf("team-a moves dev1 out of its network: %d %v", code, e)
	}
	if code, e, _ := restCall(t, c, "DELETE", api+"/network/1", ops, nil); code != 409 || !strings.Contains(fmt.Sprint(e["message"]), "holds 2 devices") {
		t.Errorf("removing a network with devices: %d %v", code, e)
	}
	if code, e, _ := restCall(t, c, "DELETE", api+"/network/2", ops, nil); code != 204 {
		t.Errorf("removing the emptied network: %d %v", code, e)
	}
	// A poll by network: dev1's notification, not dev2's.
	_, info, _ := restCall(t, c, "GET", api+"/info", "", nil)
	for _, d := range []string{"dev1", "dev2"} {
		_, toks, _ := restCall(t, c, "POST", api+"/token/create", ops, map[string]any{"deviceIds": []string{d}})
		if code, e, _ := restCall(t, c, "POST", api+"/device/"+d+"/notification", "Bearer "+toks["accessToken"].(string), map[string]any{"notification": "hello-" + d}); code != 201 {
			t.Fatalf("%s posts: %d %v", d, code, e)
		}
	}
	q := "/device/notification/poll?waitTimeout=0&networkIds=1&timestamp=" + url.QueryEscape(fmt.Sprint(info["serverTimestamp"]))
	if code, _, list := restCall(t, c, "GET", api+q, ops, nil); code != 200 || len(list) != 1 || list[0].(map[string]any)["deviceId"] != "dev1" {
		t.Fatalf("poll by network: %d %v", code, list)
	}
}
