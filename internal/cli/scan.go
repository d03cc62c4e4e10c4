package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/pki"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/scan"
)

// scanTarget is one endpoint to scan.
type scanTarget struct {
	addr, proto, name string
	roots             *x509.CertPool
}

func scanCmd(g *globals) *cobra.Command {
	var proto, name, caFile, failOn string
	var ofHub, kexRate bool
	var profile string
	var outFmt *output
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "scan [HOST:PORT...]",
		Short: "The security posture of TLS, DTLS and SSH endpoints: versions, suites, groups, certificate, downgrade, robustness",
		Long: `Scan reports what a TLS endpoint accepts and how it holds up (paper 003's security
analysis), with hand-made ClientHellos so that versions and suites no modern client offers
are found too: SSL 3.0 to TLS 1.3, every suite per version in the server's order of
preference (weak if it has none and takes the client's), TLS 1.3's suites and key-exchange groups (X25519MLKEM768 included), the
certificate (expiry, key, signature, name, chain against --ca or the system's roots),
downgrade protection (TLS_FALLBACK_SCSV, TLS 1.3's sentinel), secure renegotiation,
extended master secret, compression, resumption, ALPN; with --proto https the HSTS
header, with --proto mqtts whether an anonymous CONNECT is accepted; and whether it
still serves after malformed and oversized input. --proto ssh rates an SSH server's key
exchanges, host keys, ciphers and MACs and checks the strict key exchange (Terrapin).
--proto dtls scans a DTLS endpoint over UDP (CoAP over DTLS, for instance): DTLS 1.2 and
1.0, its suites (pre-shared-key ones included), whether it verifies a client's address
with a cookie before sending its flight (without one a spoofed flood is amplified: the
factor is reported), secure renegotiation and the extended master secret.

Each finding is info, good, weak or insecure. Scan exits 1 when a finding is at or above
--fail-on (default weak; "none" never fails), so CI can run it as is.

--hub scans the endpoints of the hub running on the data folder (SSH, front door, MQTT
over TLS) against its local CA; a hub in its default configuration has no weak finding.`,
		Example: `  iotsafe scan --hub
  iotsafe scan mqtt.example.com:8883 --proto mqtts
  iotsafe scan coap.example.com:5684 --proto dtls
  iotsafe scan 10.0.0.5:443 --proto https --name devices.example.com --ca ca.crt -o json
  iotsafe scan --hub --profile mozilla-intermediate`,
		RunE: func(cmd *cobra.Command, args []string) error {
			threshold := scan.Severity(100)
			if failOn != "none" {
				var err error
				if threshold, err = scan.ParseSeverity(failOn); err != nil || threshold < scan.Weak {
					return fmt.Errorf("--fail-on: %q: use weak, insecure or none", failOn)
				}
			}
			var prof *scan.TLSProfile
			if profile != "" {
				p, err := scan.ProfileByName(profile)
				if err != nil {
					return fmt.Errorf("--profile: %w", err)
				}
				prof = &p
			}
			targets, err := g.scanTargets(args, proto, name, caFile, ofHub)
			if err != nil {
				return err
			}
			if len(targets) == 0 {
				return errors.New("nothing to scan: name HOST:PORT targets, or --hub")
			}
			var reports []*scan.Report
			for _, t := range targets {
				r := scanOne(cmd.Context(), t, timeout, kexRate)
				if prof != nil && t.proto != "ssh" && t.proto != "dtls" {
					scan.CheckProfile(r, *prof)
				}
				reports = append(reports, r)
			}
			if ofHub {
				g.recordHubScan(cmd, reports)
			}
			return printScans(cmd, reports, outFmt, threshold)
		},
	}
	fl := c.Flags()
	fl.StringVar(&proto, "proto", "tls", "what the targets speak: tls, https (adds HSTS), mqtts (adds the anonymous-login check), ssh, or dtls (UDP)")
	fl.StringVar(&name, "name", "", "server name to send and to check the certificate against (default the target's host)")
	fl.StringVar(&caFile, "ca", "", "PEM file of the roots that must verify the chain (default the system's)")
	fl.BoolVar(&ofHub, "hub", false, "scan the TLS endpoints of the hub running on the data folder")
	outFmt = addOutput(c)
	fl.StringVar(&failOn, "fail-on", "weak", "exit 1 on a finding this bad or worse: weak, insecure, none")
	fl.DurationVar(&timeout, "timeout", 5*time.Second, "per probe")
	fl.StringVar(&profile, "profile", "", "TLS: also check what the endpoint accepts against a configuration profile: "+strings.Join(scan.ProfileNames(), ", "))
	fl.BoolVar(&kexRate, "dheat", false, "SSH: measure for 3 s how many unauthenticated key exchanges the server completes from this source (DHEat); it loads the server")
	return c
}

// scanTargets are the HOST:PORT arguments, spoken proto and checked against name and
// the roots in caFile, and with ofHub the running hub's endpoints.
func (g *globals) scanTargets(args []string, proto, name, caFile string, ofHub bool) ([]scanTarget, error) {
	switch proto {
	case "tls", "https", "mqtts", "ssh", "dtls":
	default:
		return nil, fmt.Errorf("--proto: %q: use tls, https, mqtts, ssh or dtls", proto)
	}
	var roots *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca: no PEM certificate in %s", caFile)
		}
	}
	var targets []scanTarget
	for _, a := range args {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("target %q: want HOST:PORT: %v", a, err)
		}
		targets = append(targets, scanTarget{addr: a, proto: proto, name: name, roots: roots})
	}
	if ofHub {
		ht, err := g.hubScanTargets()
		if err != nil {
			return nil, err
		}
		targets = append(targets, ht...)
	}
	return targets, nil
}

// printScans prints the reports and fails when one has a finding at or above threshold.
func printScans(cmd *cobra.Command, reports []*scan.Report, outFmt *output, threshold scan.Severity) error {
	var err error
	if outFmt.structured() {
		err = outFmt.print(cmd.OutOrStdout(), reports)
	} else {
		err = scan.Print(cmd.OutOrStdout(), reports)
	}
	if err != nil {
		return err
	}
	for _, r := range reports {
		if r.Worst() >= threshold {
			cmd.SilenceUsage = true
			return fmt.Errorf("%s: findings rated %s or worse", r.Target, threshold)
		}
	}
	return nil
}

// scanOne runs every check that fits the target's protocol.
func scanOne(ctx context.Context, t scanTarget, timeout time.Duration, kexRate bool) *scan.Report {
	o := scan.Options{Name: t.name, Roots: t.roots, Timeout: timeout, KexRate: kexRate}
	switch t.proto {
	case "ssh":
		return scan.ScanSSH(ctx, t.addr, o)
	case "dtls":
		return scan.ScanDTLS(ctx, t.addr, o)
	}
	alpn := map[string][]string{"https": {"h2", "http/1.1"}, "mqtts": {"mqtt"}}[t.proto]
	r := scan.ScanTLS(ctx, t.addr, t.proto, alpn, o)
	if r.Error != "" {
		return r
	}
	if o.Name == "" {
		o.Name, _, _ = net.SplitHostPort(t.addr)
	}
	switch t.proto {
	case "https":
		scan.CheckHSTS(ctx, r, t.addr, o)
	case "mqtts":
		scan.CheckMQTTAnonymous(ctx, r, t.addr, o)
	}
	scan.Robustness(ctx, r, t.addr, o)
	return r
}

// hubScanTargets are the running hub's TLS listeners, named and trusted as its clients
// would: the front door's domain and local CA (if it has one).
func (g *globals) hubScanTargets() ([]scanTarget, error) {
	rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpStatus})
	if err != nil {
		return nil, fmt.Errorf("--hub: the hub is not running (no answer on its admin socket in %s): %w", g.data, err)
	}
	if rep.Hub == nil {
		return nil, errors.New("--hub: the hub did not describe itself")
	}
	var roots *x509.CertPool
	if ca, err := pki.LoadCA(g.data); err == nil {
		roots = ca.Pool()
	}
	var out []scanTarget
	for _, e := range rep.Hub.Endpoints {
		// What a client reaches over TLS, and SSH: the plain listeners are loopback and
		// carry devices' SSH sessions.
		switch e.Proto {
		case "ssh", "https", "mqtts":
			out = append(out, scanTarget{addr: reachable(e.Addr), proto: e.Proto, name: e.ServerName, roots: roots})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--hub: the hub names no listener")
	}
	return out, nil
}

// reachable turns a listener's wildcard address into one a local client can dial.
func reachable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case ip == nil:
	case ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, strings.Trim(port, "[]"))
}

// recordHubScan writes the hub's scan to the audit log under the hub's name; a failure
// to record is a warning (the scan itself is printed either way).
func (g *globals) recordHubScan(cmd *cobra.Command, reports []*scan.Report) {
	worst, counts := scan.Info, map[scan.Severity]int{}
	for _, r := range reports {
		worst = max(worst, r.Worst())
		for _, f := range r.Findings {
			counts[f.Severity]++
		}
	}
	detail := fmt.Sprintf("%d endpoint(s), worst finding %s (%d insecure, %d weak)", len(reports), worst, counts[scan.Insecure], counts[scan.Weak])
	err := g.withRegistry(cmd, func(reg *registry.Registry) error {
		if cfg, err := g.loadConfig(); err == nil {
			reg.SetHub(cfg.HubName())
		}
		return reg.AddEvent(cmd.Context(), registry.Event{Kind: registry.EventHubScanned, Detail: detail})
	})
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the scan could not be recorded in the audit log: %v\n", err)
	}
}
