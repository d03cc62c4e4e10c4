package demo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/pki"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// DemoAccount is the front-door account the demo creates and grants every demo device.
const DemoAccount = "demo"

// frontdoorDemo gives the demo account a fresh token and the demo devices, fetches dev1
// through the front door (HTTPS, verified against the hub's own CA) and prints how to
// do the same with curl.
func frontdoorDemo(ctx context.Context, h *hub.Hub, o Options, addr string, mqttVia mqttVia) error {
	a, err := h.Registry().Account(ctx, DemoAccount)
	if errors.Is(err, registry.ErrNotFound) {
		var out control.Outcome
		out, err = h.Control().Apply(ctx, control.AddAccount{Name: DemoAccount})
		a = out.Account
	}
	if err != nil {
		return err
	}
	tok, hash, err := credential.NewToken()
	if err != nil {
		return err
	}
	exp := time.Now().Add(24 * time.Hour)
	changes := []control.Change{control.AddToken{Account: DemoAccount, Label: "demo run", Hash: hash, Expires: &exp}}
	for i := 1; i <= o.Devices; i++ {
		changes = append(changes, control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: a.Name, Target: fmt.Sprintf("dev%d", i), Alias: "*"}})
	}
	if err := apply(ctx, h, changes...); err != nil {
		return err
	}
	domain := o.Config.Frontdoor.Domain
	_, port, _ := net.SplitHostPort(addr)
	caFile := filepath.Join(o.DataDir, pki.CADir, pki.CACertFile)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("demo: the front door's CA: %w", err)
	}
	body, err := fetchHTTPS(ctx, addr, "dev1."+domain, tok, caPEM)
	if err != nil {
		return fmt.Errorf("demo: request through the front door failed: %w", err)
	}
	fmt.Fprintf(o.Out, "\nGET https://dev1.%s:%s/ through the front door (HTTPS, account %s) -> %s\n", domain, port, DemoAccount, body)
	fmt.Fprintf(o.Out, `People reach devices over HTTPS (token valid 24 h, account %[5]s):
  %[1]s > iotsafe-ca.crt
  curl --cacert iotsafe-ca.crt --resolve dev2.%[3]s:%[4]s:127.0.0.1 -H 'Authorization: Bearer %[6]s' https://dev2.%[3]s:%[4]s/
  %[2]s && %[7]s && %[8]s   # an account for an app: its token reaches dev1's http
`, o.cli("frontdoor ca"), o.cli("account add alice --no-password"), domain, port, DemoAccount, tok, o.cli("grant --account alice dev1 http"), o.cli("account token alice"))
	if o.Config.Frontdoor.ConsoleOn() {
		if err := consoleDemo(ctx, h, o, addr, caPEM); err != nil {
			return err
		}
	}
	if h.Store() == nil {
		return nil
	}
	if err := telemetryDemo(ctx, h, o, addr, a, tok, caPEM); err != nil {
		return err
	}
	if o.Config.SOAP.Enabled {
		if err := soapDemo(ctx, h, o, addr, caPEM); err != nil {
			return err
		}
	}
	if mqttVia.sshDevice == "" || h.Listener("mqtt_tls") == nil {
		return nil
	}
	api := fmt.Sprintf("https://%s:%s/api/rest", domain, port)
	return mqttDemo(ctx, h, o, api, addr, a, tok, caPEM, mqttVia.tlsDevice, mqttVia.sshDevice, mqttVia.forward)
}

func fetchHTTPS(ctx context.Context, addr, host, token string, caPEM []byte) (string, error) {
	code, b, err := httpsCall(ctx, addr, http.MethodGet, "https://"+host+"/", "Bearer "+token, "", caPEM)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("%d: %s", code, b)
	}
	return b, err
}

// httpsCall sends one request to the front door at addr, trusting only caPEM.
func httpsCall(ctx context.Context, addr, method, url, auth, body string, caPEM []byte) (int, string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), err
}
