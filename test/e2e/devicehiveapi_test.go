package e2e

import (
	"strings"
	"testing"
)

// DeviceHive's /user/current and /info as its clients read them (issue 53.4), and its
// network and device-type filters, which this hub has nothing to apply to, refused with
// 400 rather than ignored (issue 53.3: GET /device?networkId=999 listed every device).
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
	for _, q := range []string{"/device?networkId=999", "/device/notification/poll?deviceId=dev1&networkIds=1,2&waitTimeout=0", "/device/dev1/notification?deviceTypeId=3"} {
		code, e, _ := restCall(t, c, "GET", api+q, app, nil)
		if code != 400 || !strings.Contains(e["message"].(string), "is not supported") {
			t.Errorf("GET %s: %d %v", q, code, e)
		}
	}
	if code, _, list := restCall(t, c, "GET", api+"/device", app, nil); code != 200 || len(list) != 1 {
		t.Fatalf("GET /device without a filter: %d %v", code, list)
	}
}
