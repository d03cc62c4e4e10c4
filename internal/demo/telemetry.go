package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// telemetryDemo has dev1 log in to the REST API with a fresh secret and send one
// notification over HTTPS, reads it back as the demo account (granted +telemetry),
// sends dev1 a command that dev1 answers (commandDemo), and prints how to do it with curl.
func telemetryDemo(ctx context.Context, h *hub.Hub, o Options, addr string, acct *registry.Account, appToken string, caPEM []byte) error {
	secret, hash, err := credential.NewToken()
	if err != nil {
		return err
	}
	if err := apply(ctx, h, control.SetDeviceSecret{Device: "dev1", Hash: hash},
		control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: acct.Name, Target: "dev1", Alias: registry.RightTelemetry}},
		control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: acct.Name, Target: "dev1", Alias: registry.RightCommand}}); err != nil {
		return err
	}
	domain := o.Config.Frontdoor.Domain
	_, port, _ := net.SplitHostPort(addr)
	api := fmt.Sprintf("https://%s:%s/api/rest", domain, port)
	login, _ := json.Marshal(map[string]string{"login": "dev1", "password": secret})
	code, body, err := httpsCall(ctx, addr, http.MethodPost, api+"/token", "", string(login), caPEM)
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("demo: dev1's REST login: %d %s %v", code, body, err)
	}
	var toks struct{ AccessToken string }
	json.Unmarshal([]byte(body), &toks)
	sub, err := subscribeOverWebSocket(ctx, addr, domain, port, appToken, caPEM)
	if err != nil {
		return err
	}
	note := `{"notification":"temperature","parameters":{"celsius":21.5}}`
	code, body, err = httpsCall(ctx, addr, http.MethodPost, api+"/device/dev1/notification", "Bearer "+toks.AccessToken, note, caPEM)
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("demo: dev1's notification: %d %s %v", code, body, err)
	}
	fmt.Fprintf(o.Out, "\nPOST %s/device/dev1/notification as dev1 (JWT from its secret) -> %s", api, body)
	code, body, err = httpsCall(ctx, addr, http.MethodGet, api+"/device/dev1/notification?sortOrder=DESC&take=1", "Bearer "+appToken, "", caPEM)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("demo: reading dev1's notifications: %d %s %v", code, body, err)
	}
	fmt.Fprintf(o.Out, "GET  %s/device/dev1/notification as account %s (+telemetry) -> %s", api, acct.Name, body)
	pushed, err := sub.next()
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "WS   %s as account %s, subscribed to dev1 -> %s\n", sub.url, acct.Name, pushed)
	if err := commandDemo(ctx, o, addr, api, acct.Name, appToken, toks.AccessToken, caPEM); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, `Devices send telemetry over HTTPS with JWTs (DeviceHive's REST API; docs/telemetry.md):
  %[1]s   # dev2's secret for logins, in a file of mode 0600
  curl --cacert iotsafe-ca.crt --resolve %[3]s:%[4]s:127.0.0.1 -H 'Content-Type: application/json' -d "{\"login\":\"dev2\",\"password\":\"$(cat dev2.secret)\"}" %[5]s/token
  curl --cacert iotsafe-ca.crt --resolve %[3]s:%[4]s:127.0.0.1 -H 'Authorization: Bearer %[6]s' %[5]s/device/dev1/notification
  (wait for the next one: %[5]s/device/dev1/notification/poll?waitTimeout=30, or subscribe
   with DeviceHive's clients at wss://%[3]s:%[4]s/api/websocket)
`, o.cli("device secret rotate dev2 --out dev2.secret"), "", domain, port, api, appToken)
	return nil
}

// commandDemo has the demo account (granted +command) send dev1 a command, dev1 answer
// it, and the account read the answer.
func commandDemo(ctx context.Context, o Options, addr, api, account, appToken, devToken string, caPEM []byte) error {
	code, body, err := httpsCall(ctx, addr, http.MethodPost, api+"/device/dev1/command", "Bearer "+appToken, `{"command":"blink","parameters":{"times":3},"lifetime":60}`, caPEM)
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("demo: sending dev1 a command: %d %s %v", code, body, err)
	}
	var sent struct{ ID int64 }
	json.Unmarshal([]byte(body), &sent)
	fmt.Fprintf(o.Out, "POST %s/device/dev1/command as account %s (+command) -> %s", api, account, body)
	one := fmt.Sprintf("%s/device/dev1/command/%d", api, sent.ID)
	code, body, err = httpsCall(ctx, addr, http.MethodPut, one, "Bearer "+devToken, `{"status":"done","result":{"blinked":3}}`, caPEM)
	if err != nil || code != http.StatusNoContent {
		return fmt.Errorf("demo: dev1's answer: %d %s %v", code, body, err)
	}
	fmt.Fprintf(o.Out, "PUT  %s as dev1 -> %d\n", one, code)
	code, body, err = httpsCall(ctx, addr, http.MethodGet, one+"/poll?waitTimeout=5", "Bearer "+appToken, "", caPEM)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("demo: reading dev1's answer: %d %s %v", code, body, err)
	}
	fmt.Fprintf(o.Out, "GET  %s/poll as account %s -> %s", one, account, body)
	return nil
}
