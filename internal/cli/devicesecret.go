package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// A device's shared secrets: replacing one is 'rotate', never a bare name, because it
// locks out whatever holds the old one (issue 52.5); 'show' shows what the hub can.

func deviceSecretCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "secret",
		Short: "A device's telemetry secret for REST and MQTT logins: rotate (make a new one), show",
	}
	c.AddCommand(secretRotateCmd(g, secretKind{
		what: "telemetry secret",
		long: `Make a new telemetry secret for a device and print it once (or write it to --out,
mode 0600). The device logs in with its name and this secret at POST /api/rest/token
(DeviceHive's login/password) and to the MQTT broker over TLS. It replaces the old
secret at once, on every hub: whatever holds the old one is locked out. The hub
keeps only its SHA-256 hash, so it cannot show it again.`,
		example: `  iotsafe device secret rotate dev42 --out dev42.secret
  curl -s https://DOMAIN/api/rest/token -H 'Content-Type: application/json' \
       -d "{\"login\":\"dev42\",\"password\":\"$(cat dev42.secret)\"}"`,
		make: func(device string) (string, control.Change, error) {
			secret, hash, err := credential.NewToken()
			return secret, control.SetDeviceSecret{Device: device, Hash: hash}, err
		},
	}), &cobra.Command{
		Use:   "show NAME",
		Short: "Say whether a device has a telemetry secret (the hub keeps only its hash: it cannot show it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				if _, err := reg.Device(cmd.Context(), args[0]); err != nil {
					return err
				}
				hashes, err := reg.DeviceSecretHashes(cmd.Context())
				if err != nil {
					return err
				}
				if _, ok := hashes[args[0]]; !ok {
					return fmt.Errorf("%s has no telemetry secret: make one with 'iotsafe device secret rotate %s'", args[0], args[0])
				}
				return fmt.Errorf("%s has a telemetry secret, but the hub keeps only its SHA-256 hash and cannot show it: 'iotsafe device secret rotate %s' makes a new one (whatever holds the old one is then locked out)", args[0], args[0])
			})
		},
	})
	return renamedForm(c)
}

func deviceSOAPKeyCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "soap-key",
		Short: "A device's pre-shared key for SOAP message security: rotate (make a new one), show",
	}
	c.AddCommand(secretRotateCmd(g, secretKind{
		what: "SOAP key",
		long: `Make a new pre-shared key for a device's SOAP messages secured with WS Compact Security
or WS Security Records (paper 001; docs/soap.md), and print it as KEYID:BASE64 (or write
it to --out, mode 0600); give it to the device (iotsafe soap send --key-file). Messages
name the key by its id. It replaces the old key at once, on every hub: a device still
using the old one is refused.`,
		example: `  iotsafe device soap-key rotate dev42 --out dev42.soapkey
  iotsafe soap send --key-file dev42.soapkey --name temperature --param value=21.5`,
		make: func(device string) (string, control.Change, error) {
			k, err := wssec.NewKey()
			return k.String(), control.SetSOAPKey{Device: device, KeyID: k.ID, Secret: k.Secret}, err
		},
	}), &cobra.Command{
		Use:   "show NAME",
		Short: "Print a device's SOAP key as KEYID:BASE64 (the hub keeps it: it derives the message keys from it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				if _, err := reg.Device(cmd.Context(), args[0]); err != nil {
					return err
				}
				keys, err := reg.SOAPKeys(cmd.Context())
				if err != nil {
					return err
				}
				var k registry.SOAPKey
				for _, c := range keys {
					if c.Device == args[0] {
						k = c
					}
				}
				if k.Device == "" {
					return fmt.Errorf("%s has no SOAP key: make one with 'iotsafe device soap-key rotate %s'", args[0], args[0])
				}
				fmt.Fprintln(cmd.OutOrStdout(), wssec.Key{ID: k.KeyID, Secret: k.Secret}.String())
				return nil
			})
		},
	})
	return renamedForm(c)
}

// secretKind is one kind of device secret that 'rotate' replaces.
type secretKind struct {
	what, long, example string
	// make is a new secret as the device is given it, and the change that stores it.
	make func(device string) (shown string, ch control.Change, err error)
}

func secretRotateCmd(g *globals, k secretKind) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:     "rotate NAME",
		Short:   "Make a new " + k.what + " for a device, replacing the old one at once (printed once)",
		Long:    k.long,
		Example: k.example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			shown, ch, err := k.make(args[0])
			if err != nil {
				return err
			}
			// Refuse a folder we cannot write into before the old secret is gone.
			if out != "" {
				if err := canWriteBeside(out); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
			}
			if _, err := g.change(cmd, ch); err != nil {
				return err
			}
			if out == "" {
				fmt.Fprintln(cmd.OutOrStdout(), shown)
				fmt.Fprintf(cmd.ErrOrStderr(), "new %s of %s: keep it now; the old one no longer works\n", k.what, args[0])
				return nil
			}
			if err := atomicfile.Write(out, []byte(shown+"\n"), atomicfile.Options{}); err != nil {
				return fmt.Errorf("--out: the new %s is in force but could not be written: %w (rotate again)", k.what, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "new %s of %s written to %s (mode 0600); the old one no longer works\n", k.what, args[0], out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "write it to FILE (mode 0600) instead of standard output")
	return c
}

// canWriteBeside checks that a file can be created in path's folder (as atomicfile does).
func canWriteBeside(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".iotsafe-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// renamedForm makes a group that replaced a command taking NAME ('device secret NAME')
// refuse the old form, saying what it became: the old one replaced the secret.
func renamedForm(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return errors.New("'" + cmd.CommandPath() + " NAME' is now '" + cmd.CommandPath() + " rotate " + args[0] +
			"' (it replaces the secret; whatever holds the old one is locked out), or '" + cmd.CommandPath() + " show " + args[0] + "'")
	}
	return c
}
