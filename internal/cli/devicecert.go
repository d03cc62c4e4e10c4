package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/pki"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/registry"
)

func deviceCertCmd(g *globals) *cobra.Command {
	var expires time.Duration
	var out string
	c := &cobra.Command{
		Use:   "cert NAME",
		Short: "Issue a client certificate for a device's MQTT over TLS (the hub's CA; key created here, 0600)",
		Long: `Issue a client certificate for the device, signed by the hub's local CA (the front
door's, created when a hub first starts with a front door). The device logs in to the
broker's TLS listener with it instead of a name and secret. The key is created here and
written with mode 0600 next to the certificate: NAME.key and NAME.crt in --out.

A device has one certificate that logs in: issuing a new one (a leaked key, a device
replaced) retires the one before at once, and a client connected with it is
disconnected. The certificate also names the device's current enrolment: after 'device
remove' and a new 'device add' of the same name, old certificates no longer log in.
Revoking the device refuses its certificate at once.`,
		Example: `  iotsafe device cert dev42 --out /etc/iotsafe/certs
  mosquitto_pub -h mqtt.devices.example.com -p 8883 --cafile iotsafe-ca.crt \
      --cert dev42.crt --key dev42.key -t devices/dev42/notifications/t -m '{"c":21}' -q 1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if expires < time.Hour {
				return fmt.Errorf("--expires: %v is less than an hour", expires)
			}
			ca, err := pki.LoadCA(g.data)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("no local CA in %s: it is created when the hub starts with a front door (frontdoor.listen and frontdoor.domain) and no cert/key of its own", filepath.Join(g.data, pki.CADir))
			}
			if err != nil {
				return err
			}
			err = g.withRegistry(cmd, func(reg *registry.Registry) error {
				d, err := reg.Device(cmd.Context(), name)
				if errors.Is(err, registry.ErrNotFound) {
					return fmt.Errorf("no device %q: enroll it first with 'iotsafe device add %s'", name, name)
				}
				if err != nil {
					return err
				}
				if d.Revoked() {
					return fmt.Errorf("device %s is revoked: a revoked device gets no certificate", name)
				}
				key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				if err != nil {
					return err
				}
				der, err := ca.IssueDeviceCert(name, d.CreatedAt.UnixMicro(), key.Public(), expires)
				if err != nil {
					return err
				}
				keyPath, certPath, cert, err := writeDeviceCert(out, name, key, der)
				if err != nil {
					return err
				}
				// Recorded once the files are there: until then the older certificate,
				// if any, keeps working.
				// Through the change path: the running hub retires the earlier certificate now.
				if _, err := g.change(cmd, control.SetDeviceCert{Device: name, Serial: cert.SerialNumber.String(), NotAfter: cert.NotAfter}); err != nil {
					return fmt.Errorf("the certificate is written but not recorded, so it does not log in (move %s away and try again): %w", keyPath, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", certPath, keyPath)
				fmt.Fprintf(cmd.ErrOrStderr(), "client certificate of %s, valid until %s; copy both files to the device (the key stays secret); any earlier certificate of %s no longer logs in\n",
					name, cert.NotAfter.Format(time.DateOnly), name)
				return nil
			})
			return err
		},
	}
	c.Flags().DurationVar(&expires, "expires", 365*24*time.Hour, "how long the certificate is valid")
	c.Flags().StringVar(&out, "out", ".", "folder for NAME.crt and NAME.key")
	return c
}

// writeDeviceCert writes NAME.key (0600, from its first byte, never over an existing
// file) and then NAME.crt into out.
func writeDeviceCert(out, name string, key *ecdsa.PrivateKey, der []byte) (keyPath, certPath string, cert *x509.Certificate, err error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", "", nil, err
	}
	keyPath, certPath = filepath.Join(out, name+".key"), filepath.Join(out, name+".crt")
	kf, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", "", nil, fmt.Errorf("%w (move the old key away to issue a new certificate)", err)
	}
	if err := errors.Join(pem.Encode(kf, &pem.Block{Type: "PRIVATE KEY", Bytes: kder}), kf.Close()); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, err
	}
	cert, err = x509.ParseCertificate(der)
	return keyPath, certPath, cert, err
}
