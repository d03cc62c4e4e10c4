package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/pki"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

func soapCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "soap", Short: "SOAP device messages with compact WS-Security (paper 001)"}
	c.AddCommand(soapSendCmd(g))
	c.AddCommand(soapClassicCmds()...)
	c.AddCommand(soapGatewayCmd(g), soapDeriveKeysCmd())
	return c
}

func soapSendCmd(g *globals) *cobra.Command {
	var (
		cf         soapClientFlags
		name, text string
		params     []string
		count      int
		outFmt     *output
	)
	c := &cobra.Command{
		Use:   "send",
		Short: "Send notifications as a device would: sealed SOAP messages, answers checked",
		Long: `Send one or more notifications as SOAP messages secured with WS Compact Security (csec)
or WS Security Records (secrec), over one kept-alive connection, and check each answer:
the hub's acknowledgement is sealed with the same key and must relate to the message.

The key comes from --key-file (KEYID:BASE64, as 'iotsafe device soap-key' prints it), the
environment (IOTSAFE_SOAP_KEY), or, on the hub's own machine, from the registry for
--device. The endpoint is --url, or else the running hub's plain listener (rest.listen)
or its front door, by its domain, as the hub reports them on its admin socket.
--resolve connects a --url's name to an address of your choice (like curl's), for a
name that does not resolve on this machine.`,
		Example: `  iotsafe soap send --device dev42 --name temperature --param value=21.5 --param unit=C
  iotsafe soap send --key-file dev42.soapkey --url https://hub.example/soap --format secrec --alg aes256-gcm --text hello
  iotsafe soap send --key-file dev42.soapkey --url https://devices.localhost:8443/soap --resolve devices.localhost:8443:127.0.0.1 --name t --param v=1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := soapParams(name, text, params)
			if err != nil {
				return err
			}
			if count < 1 {
				return errors.New("--count must be at least 1")
			}
			client, err := cf.client(cmd, g)
			if err != nil {
				return err
			}
			f, suite := client.Format, client.Suite
			payload := soap.Notification(name, text, ps)
			for i := 0; i < count; i++ {
				x, err := client.Notify(cmd.Context(), payload)
				if err != nil {
					return fmt.Errorf("message %d of %d: %w", i+1, count, err)
				}
				if outFmt.structured() {
					outFmt.printLine(cmd.OutOrStdout(), map[string]any{"id": x.ID, "timestamp": x.Timestamp, "messageId": x.MessageID,
						"format": f, "algorithm": suite.Name, "requestBytes": x.RequestBytes, "answerBytes": x.Answer})
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stored notification %d at %s (%s, %s, %d bytes sent, %d received)\n", x.ID, x.Timestamp, f, suite.Name, x.RequestBytes, x.Answer)
			}
			return nil
		},
	}
	fl := c.Flags()
	cf.add(fl)
	fl.StringVar(&name, "name", "", "the notification's name (required)")
	fl.StringVar(&text, "text", "", "the notification's text, stored as {\"value\": TEXT}")
	fl.StringArrayVar(&params, "param", nil, "a parameter NAME=VALUE (repeatable)")
	fl.IntVar(&count, "count", 1, "messages to send over one connection")
	outFmt = addOutput(c)
	return c
}

// soapClientFlags are the flags of the commands that speak to the hub's SOAP endpoint
// as a device (soap send, soap gateway): whose key, where, how sealed.
type soapClientFlags struct {
	device, keyFile, target, resolve, caFile, format, alg string
}

func (cf *soapClientFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&cf.device, "device", "", "the device (its key is read from the registry when no --key-file is given)")
	fl.StringVar(&cf.keyFile, "key-file", "", "file with the device's key, KEYID:BASE64 (default: $IOTSAFE_SOAP_KEY, or the registry's for --device)")
	fl.StringVar(&cf.target, "url", "", "the endpoint (default: the running hub's http://REST_LISTEN/soap or its front door's https://DOMAIN/soap)")
	fl.StringVar(&cf.resolve, "resolve", "", "HOST:PORT:ADDR: connect to ADDR where --url names HOST:PORT (as curl's --resolve)")
	fl.StringVar(&cf.caFile, "ca", "", "PEM file of the CA that signed the endpoint's certificate (default: the hub's CA when on its machine, else the system's)")
	fl.StringVar(&cf.format, "format", string(wssec.CSec), "csec (WS Compact Security) or secrec (WS Security Records)")
	fl.StringVar(&cf.alg, "alg", wssec.DefaultSuite, "algorithm suite: "+strings.Join(wssec.SuiteNames(), ", "))
}

// client is the device's SOAP client the flags describe.
func (cf *soapClientFlags) client(cmd *cobra.Command, g *globals) (*soap.Client, error) {
	f, err := wssec.ParseFormat(cf.format)
	if err != nil {
		return nil, err
	}
	suite, err := wssec.SuiteByName(cf.alg)
	if err != nil {
		return nil, err
	}
	key, err := g.soapKey(cmd, cf.keyFile, cf.device)
	if err != nil {
		return nil, err
	}
	u, hc, err := g.soapHTTP(cf.target, cf.caFile, cf.resolve)
	if err != nil {
		return nil, err
	}
	return soap.NewClient(u, hc, key, suite, f), nil
}

// soapParams checks --name, --text and --param and returns the parameters.
func soapParams(name, text string, params []string) ([][2]string, error) {
	if name == "" {
		return nil, errors.New("--name: the notification's name is required")
	}
	var ps [][2]string
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || !soap.ValidParamName(k) {
			return nil, fmt.Errorf("--param %q: want NAME=VALUE with NAME a letter then letters, digits, '-', '_' or '.'", p)
		}
		ps = append(ps, [2]string{k, v})
	}
	if len(ps) > 0 && text != "" {
		return nil, errors.New("--text and --param: a notification holds text or parameters, not both")
	}
	return ps, nil
}

// soapHTTP is the endpoint's URL and one kept-alive client for it (soapTarget).
func (g *globals) soapHTTP(target, caFile, resolve string) (string, *http.Client, error) {
	var dial string
	u, tlsConf, err := g.soapTarget(target, caFile, &dial)
	if err != nil {
		return "", nil, err
	}
	if resolve != "" {
		if dial, err = resolveOverride(resolve, u); err != nil {
			return "", nil, err
		}
	}
	tr := &http.Transport{TLSClientConfig: tlsConf, MaxIdleConnsPerHost: 1}
	if dial != "" {
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, dial)
		}
	}
	return u, &http.Client{Timeout: 30 * time.Second, Transport: tr}, nil
}

// soapKey finds the device key: a file, the environment, or the registry.
func (g *globals) soapKey(cmd *cobra.Command, file, device string) (wssec.Key, error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return wssec.Key{}, err
		}
		return wssec.ParseKey(string(b))
	case os.Getenv("IOTSAFE_SOAP_KEY") != "":
		return wssec.ParseKey(os.Getenv("IOTSAFE_SOAP_KEY"))
	case device == "":
		return wssec.Key{}, errors.New("no key: give --key-file, set IOTSAFE_SOAP_KEY, or name the --device (on the hub's machine)")
	}
	reg, _, err := g.openRegistry(cmd.Context())
	if err != nil {
		return wssec.Key{}, err
	}
	defer reg.Close()
	keys, err := reg.SOAPKeys(cmd.Context())
	if err != nil {
		return wssec.Key{}, err
	}
	for _, k := range keys {
		if k.Device == device {
			return wssec.Key{ID: k.KeyID, Secret: k.Secret}, nil
		}
	}
	return wssec.Key{}, fmt.Errorf("device %s has no SOAP key: create one with 'iotsafe device soap-key rotate %s'", device, device)
}

// soapTarget is the endpoint URL and the TLS settings to reach it; dial is set when the
// URL's host is a name to connect somewhere else (the running hub's front door).
func (g *globals) soapTarget(target, caFile string, dial *string) (string, *tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return "", nil, err
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("--ca %s: no PEM certificate in it", caFile)
		}
	} else if ca, err := pki.LoadCA(g.data); err == nil {
		conf.RootCAs = ca.Pool()
	}
	if target != "" {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", nil, fmt.Errorf("--url %q: want http://HOST:PORT/soap or https://DOMAIN/soap", target)
		}
		return target, conf, nil
	}
	// The running hub says where it listens (a configured port 0 is only known there)
	// and by which name its front door is reached: its configuration may be a file
	// elsewhere, or in memory (the demo).
	info := g.runningHub()
	if info == nil {
		return "", nil, fmt.Errorf("no --url, and no hub answering on %s to say where its plain listener or front door is", g.adminSocket())
	}
	for _, e := range info.Endpoints {
		if e.Role == "rest" {
			return "http://" + reachable(e.Addr) + soap.Path, conf, nil
		}
	}
	for _, e := range info.Endpoints {
		if e.Role == "frontdoor" && e.ServerName != "" {
			// Name the front door's domain (the Host header and the certificate's
			// name); dial the listener, whether or not the name resolves here.
			*dial = reachable(e.Addr)
			conf.ServerName = e.ServerName
			return "https://" + net.JoinHostPort(e.ServerName, portOf(e.Addr)) + soap.Path, conf, nil
		}
	}
	return "", nil, errors.New("no --url, and the running hub has neither a plain listener (rest.listen) nor a front door")
}

// resolveOverride is where to connect for a --resolve HOST:PORT:ADDR given with the
// endpoint URL u: ADDR:PORT, when HOST:PORT is the URL's.
func resolveOverride(resolve, u string) (string, error) {
	hostPort, addr, ok := cutLast(resolve, ":")
	host, port, ok2 := cutLast(hostPort, ":")
	addr = strings.Trim(addr, "[]")
	if !ok || !ok2 || host == "" || port == "" || net.ParseIP(addr) == nil {
		return "", fmt.Errorf("--resolve %q: want HOST:PORT:ADDR, ADDR an IP address (devices.localhost:8443:127.0.0.1)", resolve)
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	upPort := pu.Port()
	if upPort == "" {
		upPort = map[string]string{"http": "80", "https": "443"}[pu.Scheme]
	}
	if !strings.EqualFold(pu.Hostname(), host) || upPort != port {
		return "", fmt.Errorf("--resolve %q names %s:%s, the endpoint is %s", resolve, host, port, net.JoinHostPort(pu.Hostname(), upPort))
	}
	return net.JoinHostPort(addr, port), nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func portOf(hostport string) string {
	_, port, _ := net.SplitHostPort(hostport)
	return port
}
