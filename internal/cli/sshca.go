package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshca"
)

// caCmd is 'iotsafe ca': SSH certificates for devices and hubs.
func caCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "ca",
		Short: "SSH certificates: the hub's CA, CAs it trusts (manufacturers' too), device and hub certificates, revocation",
		Long: `Devices can log in with an OpenSSH user certificate instead of an enrolled key: its
principal is the device's name, and a CA the hub trusts signed it. Stock OpenSSH
(CertificateFile, or KEY-cert.pub beside the key) and the agent (--certificate) present one.

  iotsafe ca init                     make this deployment's CA (DATA/ssh_ca, mode 0600) and trust it
  iotsafe ca sign dev42 --pubkey dev42.pub      sign a device's key (writes dev42-cert.pub)
  iotsafe ca revoke SERIAL            refuse it now, on every hub; its live session closes
  iotsafe ca sign-host                certify this hub's host keys: devices trust any hub by one
                                      '@cert-authority' line (agent --hub-ca)
  iotsafe ca trust acme.pub --names 'sensor-*' --profile sensor
                                      a manufacturer's CA: devices it certifies are enrolled on
                                      their first connection (zero-touch)
  iotsafe ca krl --out revoked.krl    the revocations as an OpenSSH KRL (sshd RevokedKeys)

See docs/enrollment.md.`,
	}
	c.AddCommand(caInitCmd(g), caTrustCmd(g), caListCmd(g), caUntrustCmd(g), caSignCmd(g), caSignHostCmd(g),
		caCertsCmd(g), caRevokeCmd(g), caKRLCmd(g))
	return c
}

func caInitCmd(g *globals) *cobra.Command {
	var name string
	c := &cobra.Command{
		Use:   "init",
		Short: "Make this deployment's SSH CA (once; mode 0600) and trust it for enrolled devices",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, created, err := sshca.Create(g.data)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if created {
				fmt.Fprintf(w, "made the CA key %s (mode 0600: keep it, and its backups, as secret as the registry)\n", sshca.Path(g.data))
			} else {
				fmt.Fprintf(w, "the CA key %s exists: using it\n", sshca.Path(g.data))
			}
			line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey())))
			_, err = g.change(cmd, control.TrustSSHCA{Name: name, Key: line, Names: "*"})
			switch {
			case errors.Is(err, registry.ErrExists):
				fmt.Fprintf(w, "the hub trusts it already\n")
			case err != nil:
				return err
			default:
				fmt.Fprintf(w, "the hub trusts it as CA %q for enrolled devices\n", name)
			}
			fmt.Fprintf(w, "CA %s\n", ssh.FingerprintSHA256(ca.PublicKey()))
			fmt.Fprintf(w, "sign a device's key:   iotsafe ca sign NAME --pubkey NAME.pub\n")
			fmt.Fprintf(w, "certify the hub:       iotsafe ca sign-host, then restart the hub\n")
			fmt.Fprintf(w, "devices trust any hub: @cert-authority * %s   (known_hosts; agent --hub-ca)\n", line)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "hub", "the name the registry gives this CA")
	return c
}

func readKeyFile(path string) (ssh.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: not an OpenSSH public key: %w", path, err)
	}
	return k, nil
}

func caTrustCmd(g *globals) *cobra.Command {
	var name, names, prof, approve string
	c := &cobra.Command{
		Use:   "trust CA.pub --name NAME --names PATTERN",
		Short: "Trust a CA's certificates for devices named PATTERN; with --profile it enrols them on first connect",
		Long: `Trust an OpenSSH CA for device certificates whose one principal matches --names.

Without --profile the CA vouches for devices that are enrolled already (any key the CA
certified logs them in). With --profile it is a manufacturer's CA: a device it certified
is enrolled on its first connection, with that profile, its key bound to its name from
then on; another key with the same name is refused as a cloned identity. With
--approve manual such a device waits for 'iotsafe device approve NAME'.`,
		Example: `  iotsafe ca trust acme-factory.pub --name acme --names 'sensor-*' --profile sensor
  iotsafe ca trust ops-ca.pub --name ops --names '*'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := readKeyFile(args[0])
			if err != nil {
				return err
			}
			if err := registry.ValidNamePattern(names); err != nil {
				return fmt.Errorf("--names: %v", err)
			}
			if prof != "" && !profile.ValidName(prof) {
				return fmt.Errorf("--profile %q: not a profile name", prof)
			}
			if approve != registry.ApproveAuto && approve != registry.ApproveManual {
				return fmt.Errorf("--approve %q: want auto or manual", approve)
			}
			if prof == "" && approve == registry.ApproveManual {
				return errors.New("--approve manual is for a CA that enrols devices: give it a --profile")
			}
			line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
			a, err := g.change(cmd, control.TrustSSHCA{Name: name, Key: line, Names: names, Profile: prof, Approve: approve})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if a.CA != nil && a.CA.Enrols() {
				fmt.Fprintf(w, "CA %s (%s) trusted: devices named %s it certifies are enrolled on first connect, profile %s, approve %s\n", name, ssh.FingerprintSHA256(k), names, prof, approve)
			} else {
				fmt.Fprintf(w, "CA %s (%s) trusted for enrolled devices named %s\n", name, ssh.FingerprintSHA256(k), names)
			}
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "a name for the CA (lower-case letters, digits, '-')")
	c.Flags().StringVar(&names, "names", "", "the device names it may certify: a name or a shell pattern such as 'sensor-*'")
	c.Flags().StringVar(&prof, "profile", "", "enrol the devices it certifies on first connect, with this profile (zero-touch)")
	c.Flags().StringVar(&approve, "approve", registry.ApproveAuto, "with --profile: auto (they connect at once) or manual (they wait for 'iotsafe device approve')")
	c.MarkFlagRequired("name")
	c.MarkFlagRequired("names")
	return c
}

func caListCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "list",
		Short: "List the CAs the hub trusts for devices",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				cas, err := reg.SSHCAs(cmd.Context())
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), cas)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tFINGERPRINT\tNAMES\tENROLS")
				for _, ca := range cas {
					enrols := "no (enrolled devices only)"
					if ca.Enrols() {
						enrols = fmt.Sprintf("profile %s, approve %s", ca.Profile, ca.Approve)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ca.Name, ca.Fingerprint, ca.Pattern, enrols)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func caUntrustCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "untrust NAME",
		Short: "Stop trusting a CA: its certificates are refused and the sessions they opened close (devices it enrolled keep their keys)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.change(cmd, control.UntrustSSHCA{Name: args[0]})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "CA %s no longer trusted\n", args[0])
			if !a.HubRunning {
				fmt.Fprintln(cmd.OutOrStdout(), noHubNote)
			} else if a.Closed > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "closed %d live session(s)\n", a.Closed)
			}
			return nil
		},
	}
}

// loadCA is the data folder's CA key, with the error an operator can act on.
func (g *globals) loadCA() (ssh.Signer, error) {
	ca, err := sshca.Load(g.data)
	if errors.Is(err, sshca.ErrNoCA) {
		return nil, fmt.Errorf("no CA key in %s: make it with 'iotsafe ca init' (or sign with your own CA: ssh-keygen -s)", filepath.Dir(sshca.Path(g.data)))
	}
	return ca, err
}

func caSignCmd(g *globals) *cobra.Command {
	var pubkey, out string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "sign NAME --pubkey FILE",
		Short: "Sign a device's public key into an SSH certificate for NAME (recorded; revocable by serial)",
		Long: `Sign the device's public key with this deployment's CA ('iotsafe ca init') into an
OpenSSH user certificate whose one principal is NAME, valid for --validity. Its serial
and key id are recorded in the registry first, so 'iotsafe ca revoke SERIAL' refuses it
on every hub. The certificate is written where OpenSSH looks for it: beside the key,
KEY-cert.pub; the device then logs in with 'ssh -i KEY' (or CertificateFile) or the agent.
NAME must be enrolled ('iotsafe device add NAME' — the key need not be).`,
		Example: `  iotsafe ca sign dev42 --pubkey dev42.pub --validity 2160h
  ssh -i dev42 -N -R http:80:127.0.0.1:80 dev42@hub.example.com -p 2222`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if validity < time.Minute || validity > 10*365*24*time.Hour {
				return fmt.Errorf("--validity %s: want a minute to ten years", validity)
			}
			k, err := readKeyFile(pubkey)
			if err != nil {
				return fmt.Errorf("--pubkey: %w", err)
			}
			if _, isCert := k.(*ssh.Certificate); isCert {
				return fmt.Errorf("--pubkey %s is a certificate: give the device's plain public key", pubkey)
			}
			ca, err := g.loadCA()
			if err != nil {
				return err
			}
			if err := g.withRegistry(cmd, func(reg *registry.Registry) error {
				_, err := reg.Device(cmd.Context(), name)
				if errors.Is(err, registry.ErrNotFound) {
					return fmt.Errorf("no device %q: enrol it first ('iotsafe device add %s --no-key', or with its key)", name, name)
				}
				return err
			}); err != nil {
				return err
			}
			serial, err := sshca.NewSerial()
			if err != nil {
				return err
			}
			now := time.Now()
			keyID := fmt.Sprintf("%s #%d", name, serial)
			req := sshca.Request{Key: k, Serial: serial, KeyID: keyID, Principals: []string{name}, Validity: validity}
			cert, err := sshca.Sign(ca, req, now)
			if err != nil {
				return err
			}
			validBefore := time.Unix(int64(cert.ValidBefore), 0)
			if _, err := g.change(cmd, control.RecordSSHCert{CA: ssh.FingerprintSHA256(ca.PublicKey()), Serial: serial, Device: name, KeyID: keyID,
				Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))), ValidBefore: validBefore}); err != nil {
				return err
			}
			if out == "" {
				out = sshca.CertPathFor(pubkey)
			}
			if err := atomicfile.Write(out, ssh.MarshalAuthorizedKey(cert), atomicfile.Options{Mode: 0o644}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "certificate for %s, serial %d, valid until %s: %s\n", name, serial, validBefore.UTC().Format(time.RFC3339), out)
			return nil
		},
	}
	c.Flags().StringVar(&pubkey, "pubkey", "", "the device's public key FILE (OpenSSH)")
	c.Flags().StringVar(&out, "out", "", "where to write the certificate (default: beside the key, KEY-cert.pub)")
	c.Flags().DurationVar(&validity, "validity", 365*24*time.Hour, "how long it is valid")
	c.MarkFlagRequired("pubkey")
	return c
}

func caSignHostCmd(g *globals) *cobra.Command {
	var hostKey, out, hubData string
	var principals []string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "sign-host",
		Short: "Certify a hub's host keys with the CA: devices then trust every hub of the deployment by one line",
		Long: `Sign the host keys of a hub into OpenSSH host certificates. The hub presents them beside
its keys (after a restart); a device that trusts the CA ('@cert-authority' in known_hosts,
or the agent's --hub-ca) trusts any hub the CA certified for the address it dials, through
host key rotations and on every hub sharing the registry.

By default it signs this data folder's signing and next host keys and writes each
certificate beside its key (KEY-cert.pub, where the hub reads it; a next key's certificate
follows it when 'iotsafe hostkey promote' makes it the signing key). For another hub:
--hub-data its data folder, or --host-key its public key and --out.

--principal names what devices dial (host names and addresses); default: the host of
the hub's ssh.listen and 'localhost' when it is loopback.`,
		Example: `  iotsafe ca sign-host --principal hub1.example.com --principal 10.0.0.5
  iotsafe ca sign-host --hub-data /var/lib/iotsafe-hub2 --principal hub2.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if validity < time.Hour {
				return fmt.Errorf("--validity %s: want at least an hour", validity)
			}
			ca, err := g.loadCA()
			if err != nil {
				return err
			}
			if len(principals) == 0 {
				principals = g.defaultHostPrincipals()
			}
			type target struct {
				key ssh.PublicKey
				out string
			}
			var targets []target
			switch {
			case hostKey != "":
				k, err := readKeyFile(hostKey)
				if err != nil {
					return fmt.Errorf("--host-key: %w", err)
				}
				if out == "" {
					out = sshca.CertPathFor(hostKey)
				}
				targets = append(targets, target{k, out})
			default:
				dir := g.data
				if hubData != "" {
					dir = hubData
				}
				entries, err := hostkey.List(dir)
				if err != nil {
					return err
				}
				for _, e := range entries {
					if e.State == "signing" || e.State == "next" {
						targets = append(targets, target{e.Key, filepath.Join(dir, e.File) + hostkey.CertSuffix})
					}
				}
				if len(targets) == 0 {
					return fmt.Errorf("no host key in %s: start the hub there once (it makes them), or give --host-key", dir)
				}
			}
			w := cmd.OutOrStdout()
			for _, t := range targets {
				serial, err := sshca.NewSerial()
				if err != nil {
					return err
				}
				cert, err := sshca.Sign(ca, sshca.Request{Key: t.key, Serial: serial, KeyID: "hub " + strings.Join(principals, ","),
					Principals: principals, Validity: validity, Host: true}, time.Now())
				if err != nil {
					return err
				}
				if err := atomicfile.Write(t.out, ssh.MarshalAuthorizedKey(cert), atomicfile.Options{Mode: 0o644}); err != nil {
					return err
				}
				fmt.Fprintf(w, "host certificate for %s (%s), principals %s, until %s: %s\n", ssh.FingerprintSHA256(t.key), t.key.Type(),
					strings.Join(principals, ","), time.Unix(int64(cert.ValidBefore), 0).UTC().Format(time.RFC3339), t.out)
			}
			fmt.Fprintf(w, "restart the hub to present it; devices trust it with:\n  @cert-authority * %s", ssh.MarshalAuthorizedKey(ca.PublicKey()))
			return nil
		},
	}
	c.Flags().StringVar(&hostKey, "host-key", "", "sign this host public key FILE (another hub's) instead of a data folder's")
	c.Flags().StringVar(&hubData, "hub-data", "", "sign the host keys of this hub data folder (default: this one)")
	c.Flags().StringVar(&out, "out", "", "with --host-key: where to write the certificate (default: beside it, KEY-cert.pub)")
	c.Flags().StringArrayVar(&principals, "principal", nil, "a host name or address devices dial (repeatable)")
	c.Flags().DurationVar(&validity, "validity", 5*365*24*time.Hour, "how long it is valid")
	return c
}

// defaultHostPrincipals are the host of the configured SSH listener (and localhost with
// a loopback one).
func (g *globals) defaultHostPrincipals() []string {
	listen := "127.0.0.1:2222"
	if cfg, err := g.loadConfig(); err == nil && cfg.SSH.Listen != "" {
		listen = cfg.SSH.Listen
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		if h, err := os.Hostname(); err == nil {
			return []string{h}
		}
		return []string{"localhost"}
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return []string{host, "localhost"}
	}
	return []string{host}
}

func caCertsCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "certs",
		Short: "List the device certificates the hub signed and the revoked ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				certs, err := reg.SSHCerts(cmd.Context())
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), certs)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SERIAL\tDEVICE\tKEY\tSTATE")
				now := time.Now()
				for _, c := range certs {
					serial, state := c.Serial, "valid"
					if serial == "" {
						serial = "(every cert of the key)"
					}
					switch {
					case c.RevokedAt != nil:
						state = "revoked " + c.RevokedAt.UTC().Format(time.RFC3339)
						if c.RevokeWhy != "" {
							state += ": " + c.RevokeWhy
						}
					case c.ValidBefore != nil && now.After(*c.ValidBefore):
						state = "expired"
					case c.ValidBefore != nil:
						state = "until " + c.ValidBefore.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", serial, c.Device, c.KeyFingerprint, state)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func caRevokeCmd(g *globals) *cobra.Command {
	var certFile, reason string
	var outFmt *output
	c := &cobra.Command{
		Use:   "revoke [SERIAL] [--cert FILE]",
		Short: "Refuse a device certificate from now on, on every hub, and close the session it opened",
		Long: `Revoke a certificate the hub signed, by its serial ('iotsafe ca certs'), or any trusted
CA's certificate, by its file (by serial; by key when its serial is 0). The device's live
sessions that logged in with its key close at once, on whichever hub holds them. A key
the registry bound to the device (a zero-touch enrolment) is revoked with it.
To refuse a device whatever it presents: 'iotsafe device revoke NAME'.`,
		Example: `  iotsafe ca revoke 4711203582
  iotsafe ca revoke --cert sensor-0042-cert.pub --reason 'returned for repair'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ch control.RevokeSSHCert
			switch {
			case len(args) == 1 && certFile != "", len(args) == 0 && certFile == "":
				return errors.New("give a SERIAL ('iotsafe ca certs') or --cert FILE")
			case certFile != "":
				k, err := readKeyFile(certFile)
				if err != nil {
					return fmt.Errorf("--cert: %w", err)
				}
				cert, ok := k.(*ssh.Certificate)
				if !ok || cert.CertType != ssh.UserCert || len(cert.ValidPrincipals) != 1 {
					return fmt.Errorf("--cert %s: not a device certificate (a user certificate naming one device)", certFile)
				}
				ch = control.RevokeSSHCert{CA: ssh.FingerprintSHA256(cert.SignatureKey), Serial: cert.Serial,
					Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert.Key))), Device: cert.ValidPrincipals[0]}
			default:
				serial, err := strconv.ParseUint(args[0], 10, 64)
				if err != nil || serial == 0 {
					return fmt.Errorf("%q: want a serial as 'iotsafe ca certs' lists it (or --cert FILE)", args[0])
				}
				if err := g.withRegistry(cmd, func(reg *registry.Registry) error {
					certs, err := reg.SSHCerts(cmd.Context())
					if err != nil {
						return err
					}
					for _, c := range certs {
						if c.Serial == args[0] {
							ch = control.RevokeSSHCert{CA: c.CAFingerprint, Serial: serial, Key: c.PublicKey, Device: c.Device}
							return nil
						}
					}
					return fmt.Errorf("no certificate with serial %d was signed here ('iotsafe ca certs'); for another CA's, give --cert FILE", serial)
				}); err != nil {
					return err
				}
			}
			ch.Reason = reason
			a, err := g.change(cmd, ch)
			if err != nil {
				return err
			}
			what := fmt.Sprintf("certificate serial %d of %s revoked", ch.Serial, ch.Device)
			if ch.Serial == 0 {
				what = "every certificate of the key of " + ch.Device + " revoked"
			}
			k, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(ch.Key))
			return reportClosed(cmd, a, ch.Device, ssh.FingerprintSHA256(k), "certificate revoked", what, outFmt)
		},
	}
	c.Flags().StringVar(&certFile, "cert", "", "the certificate FILE to revoke (any trusted CA's)")
	c.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	outFmt = addOutput(c)
	return c
}

func caKRLCmd(g *globals) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "krl --out FILE",
		Short: "Write the revocations as an OpenSSH KRL (for stock sshd's RevokedKeys, ssh-keygen -Q)",
		Long: `Write an OpenSSH key revocation list of the registry's revocations: the revoked serials
of every trusted CA, the keys of revoked certificates, and the keys of revoked devices.
The hub itself needs none (it reads the registry); it is for stock sshd and tools.`,
		Example: `  iotsafe ca krl --out /etc/ssh/revoked.krl && ssh-keygen -Q -f /etc/ssh/revoked.krl dev42-cert.pub`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				rev, err := reg.SSHRevocations(cmd.Context())
				if err != nil {
					return err
				}
				version, err := reg.LastChangeID(cmd.Context())
				if err != nil {
					return err
				}
				krl, err := sshca.MarshalKRL(sshca.Revoked{Serials: rev.Serials, Keys: rev.Keys}, uint64(max(version, 0)), time.Now(), "iotsafe "+g.data)
				if err != nil {
					return err
				}
				if err := atomicfile.Write(out, krl, atomicfile.Options{Mode: 0o644}); err != nil {
					return err
				}
				n := 0
				for _, s := range rev.Serials {
					n += len(s)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d revoked serial(s), %d revoked key(s)\n", out, n, len(rev.Keys))
				return nil
			})
		},
	}
	c.Flags().StringVar(&out, "out", "", "the KRL FILE to write")
	c.MarkFlagRequired("out")
	return c
}
