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
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// ConsoleAccount is the account the demo gives the operator console, with +admin on
// every device; its password is kept in DATA/demo-keys/operator.password (mode 0600).
const ConsoleAccount = "operator"

// consoleDemo makes sure the console's account exists with a password the demo knows,
// logs in with it as a browser would, and prints the URL and the login.
func consoleDemo(ctx context.Context, h *hub.Hub, o Options, addr string, caPEM []byte) error {
	pw, err := consolePassword(ctx, h, filepath.Join(o.DataDir, "demo-keys", ConsoleAccount+".password"))
	if err != nil {
		return err
	}
	if err := apply(ctx, h, control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: ConsoleAccount,
		Target: registry.AllDevices, Alias: registry.RightAdmin}}); err != nil {
		return err
	}
	domain := o.Config.Frontdoor.Domain
	_, port, _ := net.SplitHostPort(addr)
	base := fmt.Sprintf("https://%s:%s/console/", domain, port)
	online, err := consoleLogin(ctx, addr, base, pw, caPEM)
	if err != nil {
		return fmt.Errorf("demo: logging in to the console: %w", err)
	}
	fmt.Fprintf(o.Out, "\nGET %s as account %s -> the fleet page, %s device(s) online\n", base, ConsoleAccount, online)
	fmt.Fprintf(o.Out, `The operator console, in a browser (trust iotsafe-ca.crt, or accept the hub's certificate once):
  %s   account %s, password %s
`, base, ConsoleAccount, pw)
	return nil
}

// consolePassword is the console account's password: the one the demo kept, or a new
// one it sets (and keeps, mode 0600) when there is none yet.
func consolePassword(ctx context.Context, h *hub.Hub, file string) (string, error) {
	_, err := h.Registry().Account(ctx, ConsoleAccount)
	exists := err == nil
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return "", err
	}
	if b, err := os.ReadFile(file); err == nil && exists {
		return strings.TrimSpace(string(b)), nil
	}
	tok, _, err := credential.NewToken()
	if err != nil {
		return "", err
	}
	pw := "demo-" + tok[len(tok)-16:]
	hash, err := credential.HashPassword(pw)
	if err != nil {
		return "", err
	}
	var ch control.Change = control.AddAccount{Name: ConsoleAccount, PasswordHash: hash}
	if exists {
		ch = control.SetPassword{Account: ConsoleAccount, PasswordHash: hash}
	}
	if err := apply(ctx, h, ch); err != nil {
		return "", err
	}
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		return "", err
	}
	return pw, nil
}

var onlineCount = regexp.MustCompile(`data-count="online">(\d+)<`)

// consoleLogin logs in through the console's login form and reads the fleet page.
func consoleLogin(ctx context.Context, addr, base, pw string, caPEM []byte) (string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Jar: jar, Timeout: 30 * time.Second}
	form := url.Values{"user": {ConsoleAccount}, "password": {pw}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req) // followed to the fleet page
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	m := onlineCount.FindSubmatch(b)
	if resp.StatusCode != http.StatusOK || m == nil {
		return "", fmt.Errorf("%s: not the fleet page", resp.Status)
	}
	return string(m[1]), nil
}
