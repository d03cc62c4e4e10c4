package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Refresh tokens end with what issued them (issue 48, item 4): a device's with a new
// telemetry secret (also a token from 'iotsafe device token'), an account's with a new
// password and with 'account logout'; and 'jwt rotate --retire-now' ends every token of
// the older keys at once (item 13). Each time, logging in again works.
func TestTokensEndWithTheirCredential(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nrest: {listen: '127.0.0.1:0'}\n")
	h.addDevice("dev1")
	h.addAccount("app", "app-password-1")
	h.mustCLI("grant", "--account", "app", "dev1", "+telemetry")
	c := fdClient(t, h, h.mustCLI("frontdoor", "ca"), nil)
	api := "https://" + fdDomain + ":" + portOf(h.front) + "/api/rest"
	login := func(name, pw string) string {
		t.Helper()
		code, body, _ := restCall(t, c, "POST", api+"/token", "", map[string]string{"login": name, "password": pw})
		if code != 201 {
			t.Fatalf("login %s: %d %v", name, code, body)
		}
		return body["refreshToken"].(string)
	}
	refreshes := func(tok string) (bool, string) {
		code, body, _ := restCall(t, c, "POST", api+"/token/refresh", "", map[string]string{"refreshToken": tok})
		return code == 201, fmt.Sprint(body["message"])
	}
	secret := func() string { return strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1")) }
	passwd := func(pw string) {
		cmd := exec.Command(iotsafeBin, "account", "passwd", "app", "--password-stdin", "--data", h.data)
		cmd.Stdin = strings.NewReader(pw + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("account passwd: %v %s", err, out)
		}
	}

	devTok := login("dev1", secret())
	cliTok := strings.TrimSpace(h.mustCLIStdout("device", "token", "dev1", "--expires", "1h"))
	for _, tok := range []string{devTok, cliTok} {
		if ok, msg := refreshes(tok); !ok {
			t.Fatalf("a device's fresh refresh token: %s", msg)
		}
	}
	newSecret := secret() // rotation
	for name, tok := range map[string]string{"login": devTok, "device token": cliTok} {
		if ok, msg := refreshes(tok); ok || !strings.Contains(msg, "earlier secret") {
			t.Errorf("a device's %s refresh token after its secret was replaced: ok=%v %s", name, ok, msg)
		}
	}
	login("dev1", newSecret)

	appTok := login("app", "app-password-1")
	passwd("app-password-2")
	if ok, msg := refreshes(appTok); ok || !strings.Contains(msg, "password changed or it logged out") {
		t.Errorf("an account's refresh token after a new password: ok=%v %s", ok, msg)
	}
	appTok = login("app", "app-password-2")
	h.mustCLI("account", "logout", "app")
	if ok, msg := refreshes(appTok); ok || !strings.Contains(msg, "logged out") {
		t.Errorf("an account's refresh token after logout: ok=%v %s", ok, msg)
	}

	appTok = login("app", "app-password-2")
	out := h.mustCLIStdout("jwt", "rotate", "--retire-now")
	if !strings.Contains(out, "retired now") {
		t.Fatalf("jwt rotate --retire-now: %s", out)
	}
	poll(t, "the retired key's tokens refused", func() bool { ok, _ := refreshes(appTok); return !ok })
	if ok, msg := refreshes(login("app", "app-password-2")); !ok {
		t.Fatalf("a token of the new key: %s", msg)
	}
}
