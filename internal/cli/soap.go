package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/pki"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

func deviceSOAPKeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "soap-key NAME",
		Short: "Create (or replace) a device's pre-shared key for SOAP message security (printed once)",
		Long: `Create (or replace) a device's pre-shared key for SOAP messages secured with WS Compact
Security or WS Security Records (paper 001; docs/soap.md). It is printed once as
KEYID:BASE64; give it to the device (iotsafe soap send --key-file). Messages name the key
by its id. The key is kept in the registry (mode 0600), since the hub derives the cipher
and MAC keys from it; a new one replaces the old at once, on every hub.`,
		Example: `  iotsafe device soap-key dev42 > dev42.soapkey
  iotsafe soap send --key-file dev42.soapkey --url https://DOMAIN/soap --name temperature --param value=21.5`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := wssec.NewKey()
			if err != nil {
				return err
			}
			if _, err := g.change(cmd, control.SetSOAPKey{Device: args[0], KeyID: k.ID, Secret: k.Secret}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.String())
			fmt.Fprintf(cmd.ErrOrStderr(), "SOAP key %s of %s: keep it now, it is not shown again (a new 'iotsafe device soap-key %s' replaces it)\n", k.ID, args[0], args[0])
			return nil
		},
	}
}

func soapCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "soap", Short: "SOAP device messages with compact WS-Security (paper 001)"}
	c.AddCommand(soapSendCmd(g))
	return c
}

func soapSendCmd(g *globals) *cobra.Command {
	var (
		device, keyFile, target, format, alg, name, text, caFile string
		params                                                   []string
		count                                                    int
		asJSON                                                   bool
	)
	c := &cobra.Command{
		Use:   "send",
		Short: "Send notifications as a device would: sealed SOAP messages, answers checked",
		Long: `Send one or more notifications as SOAP messages secured with WS Compact Security (csec)
or WS Security Records (secrec), over one kept-alive connection, and check each answer:
the hub's acknowledgement is sealed with the same key and must relate to the message.

The key comes from --key-file (KEYID:BASE64, as 'iotsafe device soap-key' prints it), the
environment (IOTSAFE_SOAP_KEY), or, on the hub's own machine, from the registry for
--device. The endpoint is --url, or else the hub's plain listener (rest.listen) or its
front door, read from the hub's config.`,
		Example: `  iotsafe soap send --device dev42 --name temperature --param value=21.5 --param unit=C
  iotsafe soap send --key-file dev42.soapkey --url https://hub.example/soap --format secrec --alg aes256-gcm --text hello`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := wssec.ParseFormat(format)
			if err != nil {
				return err
			}
			suite, err := wssec.SuiteByName(alg)
			if err != nil {
				return err
			}
			ps, err := soapParams(name, text, params)
			if err != nil {
				return err
			}
			if count < 1 {
				return errors.New("--count must be at least 1")
			}
			key, err := g.soapKey(cmd, keyFile, device)
			if err != nil {
				return err
			}
			u, hc, err := g.soapHTTP(target, caFile)
			if err != nil {
				return err
			}
			client := soap.NewClient(u, hc, key, suite, f)
			payload := soap.Notification(name, text, ps)
			for i := 0; i < count; i++ {
				x, err := client.Notify(cmd.Context(), payload)
				if err != nil {
					return fmt.Errorf("message %d of %d: %w", i+1, count, err)
				}
				if asJSON {
					json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"id": x.ID, "timestamp": x.Timestamp, "messageId": x.MessageID,
						"format": f, "algorithm": suite.Name, "requestBytes": x.RequestBytes, "answerBytes": x.Answer})
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stored notification %d at %s (%s, %s, %d bytes sent, %d received)\n", x.ID, x.Timestamp, f, suite.Name, x.RequestBytes, x.Answer)
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&device, "device", "", "the device (its key is read from the registry when no --key-file is given)")
	fl.StringVar(&keyFile, "key-file", "", "file with the device's key, KEYID:BASE64 (default: $IOTSAFE_SOAP_KEY, or the registry's for --device)")
	fl.StringVar(&target, "url", "", "the endpoint (default: http://REST_LISTEN/soap or the front door's https://DOMAIN/soap)")
	fl.StringVar(&caFile, "ca", "", "PEM file of the CA that signed the endpoint's certificate (default: the hub's CA when on its machine, else the system's)")
	fl.StringVar(&format, "format", string(wssec.CSec), "csec (WS Compact Security) or secrec (WS Security Records)")
	fl.StringVar(&alg, "alg", wssec.DefaultSuite, "algorithm suite: "+strings.Join(wssec.SuiteNames(), ", "))
	fl.StringVar(&name, "name", "", "the notification's name (required)")
	fl.StringVar(&text, "text", "", "the notification's text, stored as {\"value\": TEXT}")
	fl.StringArrayVar(&params, "param", nil, "a parameter NAME=VALUE (repeatable)")
	fl.IntVar(&count, "count", 1, "messages to send over one connection")
	fl.BoolVar(&asJSON, "json", false, "one JSON object per answer")
	return c
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
func (g *globals) soapHTTP(target, caFile string) (string, *http.Client, error) {
	var dial string
	u, tlsConf, err := g.soapTarget(target, caFile, &dial)
	if err != nil {
		return "", nil, err
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
	return wssec.Key{}, fmt.Errorf("device %s has no SOAP key: create one with 'iotsafe device soap-key %s'", device, device)
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
	cfg, err := hub.LoadConfig(g.config, g.data)
	if err != nil {
		return "", nil, err
	}
	// The running hub says where it listens (a configured port 0 is only known there).
	var listeners map[string]string
	if rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpStatus}); err == nil && rep.Hub != nil {
		listeners = rep.Hub.Listeners
	}
	if a, ok := listeners["rest"]; ok {
		return "http://" + reachable(a) + soap.Path, conf, nil
	}
	if a, ok := listeners["frontdoor"]; ok {
		// The front door serves its domain: name it (the Host header and the
		// certificate's name), dial the listener.
		*dial = reachable(a)
		return "https://" + net.JoinHostPort(cfg.Frontdoor.Domain, portOf(a)) + soap.Path, conf, nil
	}
	if cfg.REST.Listen != "" && !strings.HasSuffix(cfg.REST.Listen, ":0") {
		return "http://" + cfg.REST.Listen + soap.Path, conf, nil
	}
	return "", nil, errors.New("no --url, and no running hub to say where its plain listener or front door is")
}

func portOf(hostport string) string {
	_, port, _ := net.SplitHostPort(hostport)
	return port
}
