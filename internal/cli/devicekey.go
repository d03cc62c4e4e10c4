package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
)

func deviceKeyCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "key",
		Short: "Rotate a device's keys: add the new one, move the device to it, revoke the old one",
		Long: `A device may hold several keys; each is accepted until it is revoked. To rotate without
downtime: 'iotsafe device key add' the new key, install it on the device (its agent
reconnects with it), then 'iotsafe device key revoke' the old one: sessions that still use
it close at once and it is refused from then on. 'iotsafe device show' lists the keys.`,
	}
	c.AddCommand(deviceKeyAddCmd(g), deviceKeyRevokeCmd(g))
	return c
}

func deviceKeyAddCmd(g *globals) *cobra.Command {
	var pubkey, keygen string
	c := &cobra.Command{
		Use:   "add NAME",
		Short: "Give a device another key (both work until the old one is revoked)",
		Example: `  iotsafe device key add dev1 --keygen ./keys     # creates ./keys/new-YYYYMMDDTHHMMSS/dev1 and dev1.pub
  iotsafe device key add cam7 --pubkey cam7-2027.pub`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if (pubkey == "") == (keygen == "") {
				return errors.New("give exactly one of --pubkey FILE or --keygen DIR")
			}
			if err := checkDeviceName(name); err != nil {
				return err
			}
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				// Checked before a key file is written.
				if _, err := reg.Device(cmd.Context(), name); err != nil {
					return err
				}
				var key ssh.PublicKey
				var keyFile string
				var err error
				if pubkey != "" {
					key, err = readPublicKey(pubkey)
				} else {
					// A folder of its own keeps the file's base name the device name, which
					// is what the agent assumes when --device is not given.
					key, keyFile, err = generateDeviceKey(filepath.Join(keygen, "new-"+time.Now().UTC().Format("20060102T150405"), name), name)
				}
				if err != nil {
					return err
				}
				if _, err := g.change(cmd, control.AddKey{Device: name, Key: string(ssh.MarshalAuthorizedKey(key))}); err != nil {
					if keyFile != "" {
						removeKeyPair(keyFile)
					}
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "key %s added to %s; its other keys still work\n", ssh.FingerprintSHA256(key), name)
				if keyFile != "" {
					fmt.Fprintf(w, "private key written to %s (mode 0600): copy it to the device\n", keyFile)
				}
				fmt.Fprintf(w, "once the device uses it: iotsafe device key revoke %s OLD-FINGERPRINT (see 'iotsafe device show %s')\n", name, name)
				return nil
			})
		},
	}
	c.Flags().StringVar(&pubkey, "pubkey", "", "the device's new OpenSSH public key FILE")
	c.Flags().StringVar(&keygen, "keygen", "", "create an ed25519 key pair in DIR (DIR/new-TIMESTAMP/NAME, .pub beside it)")
	return c
}

func deviceKeyRevokeCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:     "revoke NAME FINGERPRINT",
		Short:   "Refuse one key of a device from now on and close the sessions that use it",
		Example: `  iotsafe device key revoke dev1 SHA256:8hJ0...`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, fp := args[0], args[1]
			a, err := g.change(cmd, control.RevokeKey{Device: name, Fingerprint: fp})
			if err != nil {
				return err
			}
			return reportClosed(cmd, a, name, fp, "key revoked", fmt.Sprintf("key %s of %s revoked", fp, name), outFmt)
		},
	}
	outFmt = addOutput(c)
	return c
}
