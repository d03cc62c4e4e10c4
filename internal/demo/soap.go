package demo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// soapDemo gives dev1 a SOAP key and has it send one notification as a WS Security
// Record over the front door's HTTPS (paper 001), checks the hub's sealed answer, and
// prints how to do it with the CLI.
func soapDemo(ctx context.Context, h *hub.Hub, o Options, addr string, caPEM []byte) error {
	k, err := wssec.NewKey()
	if err != nil {
		return err
	}
	if err := apply(ctx, h, control.SetSOAPKey{Device: "dev1", KeyID: k.ID, Secret: k.Secret}); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	defer tr.CloseIdleConnections()
	domain := o.Config.Frontdoor.Domain
	_, port, _ := net.SplitHostPort(addr)
	url := fmt.Sprintf("https://%s:%s%s", domain, port, soap.Path)
	s, _ := wssec.SuiteByName(wssec.DefaultSuite)
	c := soap.NewClient(url, &http.Client{Transport: tr, Timeout: 30 * time.Second}, k, s, wssec.SecRec)
	x, err := c.Notify(ctx, soap.Notification("temperature", "", [][2]string{{"celsius", "21.7"}}))
	if err != nil {
		return fmt.Errorf("demo: dev1's SOAP message: %w", err)
	}
	fmt.Fprintf(o.Out, "\nPOST %s as dev1 (a WS Security Record, %s, %d bytes) -> notification %d, answer sealed with dev1's key\n", url, s.Name, x.RequestBytes, x.ID)
	fmt.Fprintf(o.Out, `SOAP devices secure each message (WS Compact Security or WS Security Records; docs/soap.md):
  %[1]s
  %[2]s
`, o.cli("device soap-key rotate dev2 --out dev2.soapkey"), o.cli("soap send --key-file dev2.soapkey --format csec --name temperature --param celsius=22.1"))
	return nil
}
