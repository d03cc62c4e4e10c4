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
// notification over HTTPS, reads it back as the demo account (granted +telemetry), and
// prints how to do both with curl.
func telemetryDemo(ctx context.Context, h *hub.Hub, o Options, addr string, acct *registry.Account, appToken string, caPEM []byte) error {
	secret, hash, err := credential.NewToken()
	if err != nil {
		return err
	}
	if err := apply(ctx, h, control.SetDeviceSecret{Device: "dev1", Hash: hash},
		control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: acct.Name, Target: "dev1", Alias: registry.RightTelemetry}}); err != nil {
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
	fmt.Fprintf(o.Out, `Devices send telemetry over HTTPS with JWTs (DeviceHive's REST API; docs/telemetry.md):
  SECRET=$(%[1]s device secret dev2 --data %[2]s) && curl --cacert iotsafe-ca.crt --resolve %[3]s:%[4]s:127.0.0.1 -H 'Content-Type: application/json' -d "{\"login\":\"dev2\",\"password\":\"$SECRET\"}" %[5]s/token
  curl --cacert iotsafe-ca.crt --resolve %[3]s:%[4]s:127.0.0.1 -H 'Authorization: Bearer %[6]s' %[5]s/device/dev1/notification
  (wait for the next one: %[5]s/device/dev1/notification/poll?waitTimeout=30)
`, o.Binary, o.DataDir, domain, port, api, appToken)
	return nil
}
