package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/soap"
)

// soapGatewayCmd is 'iotsafe soap gateway': plain SOAP in, sealed SOAP to the hub.
func soapGatewayCmd(g *globals) *cobra.Command {
	var listen string
	var cf soapClientFlags
	c := &cobra.Command{
		Use:   "gateway",
		Short: "Take plain SOAP 1.2 from local tooling (zeep, JAX-WS) and send it to the hub sealed as a device",
		Long: `Listen on a loopback address for plain SOAP 1.2 envelopes holding a Notification (as a
client generated from the hub's WSDL, GET /soap?wsdl, sends them), seal each with the
device's key (WS Compact Security by default), send it to the hub, check the sealed
answer, and answer the client a plain envelope holding the NotificationAck, or the hub's
fault. It speaks as the device for whoever reaches it, so it listens on loopback only.
The hub is found as for 'soap send' (--url, --resolve, --ca, or the running hub).`,
		Example: `  iotsafe soap gateway --key-file dev42.soapkey --url https://devices.example.com/soap --listen 127.0.0.1:8081
  # then point the SOAP client at http://127.0.0.1:8081/ with the WSDL of https://devices.example.com/soap?wsdl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := hostport.Listen(listen); err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			if host, _, _ := net.SplitHostPort(listen); !isLoopback(host) {
				return fmt.Errorf("--listen %s: the gateway speaks as the device for whoever reaches it; give it a loopback address", listen)
			}
			client, err := cf.client(cmd, g)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: &soap.Gateway{Client: client},
				ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
			fmt.Fprintf(cmd.ErrOrStderr(), "soap gateway on http://%s/ -> %s as key %s (%s, %s); Ctrl-C stops it\n", ln.Addr(), client.URL, client.Key.ID, client.Format, client.Suite.Name)
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			}()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:8081", "loopback address for the local SOAP clients")
	cf.add(fl)
	return c
}

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
