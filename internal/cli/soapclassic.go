package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// soapClassicCmds are 'iotsafe soap to-classic' and 'from-classic': the lossless mapping
// between WS Compact Security and classic OASIS WS-Security (XML Signature and XML
// Encryption), for integrators whose tools speak the classic form (xmlsec1, signxml,
// WS-Security stacks). Neither needs a key: the signature and ciphertext carry over.
func soapClassicCmds() []*cobra.Command {
	convert := func(use, short, long, example string, fn func([]byte, wssec.Limits) ([]byte, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " [FILE|-]", Short: short, Long: long, Example: example,
			Args: cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				in, name, err := readInput(cmd, args)
				if err != nil {
					return err
				}
				out, err := fn(in, wssec.Limits{})
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			},
		}
	}
	return []*cobra.Command{
		convert("to-classic", "Write a WS Compact Security message as classic WS-Security (wsse:Security, XML Signature, XML Encryption)",
			`Read a WS Compact Security message (csec; a file, or standard input for '-' or none)
and write the same message in classic OASIS WS-Security: a wsse:Security header with
the timestamp and an XML Signature (exclusive canonicalization, HMAC over the derived
MAC key, one reference per signed element), and the Body as xenc:EncryptedData under the
derived encryption key. xmlsec1 verifies and decrypts it (docs/soap.md). A WS Security
Record (secrec) has no classic form: its digest and ciphertext are one run.`,
			"  iotsafe soap to-classic message.xml > classic.xml   # then xmlsec1 --verify and --decrypt (docs/soap.md)", wssec.ToClassic),
		convert("from-classic", "Write a classic WS-Security message of the supported shape as WS Compact Security",
			`Read a classic WS-Security message (a file, or standard input for '-' or none), as
'to-classic' writes it or as xmlsec1 signs and encrypts the template in docs/soap.md, and
write it as WS Compact Security, which the hub's /soap endpoint takes. It checks, without
a key, that nothing is lost: one algorithm suite for every reference, exclusive
canonicalization, the digests matching the message, the EncryptedData in its fixed
shape; otherwise it says what does not fit.`,
			"  iotsafe soap from-classic signed.xml | curl --data-binary @- -H 'Content-Type: application/soap+xml' https://DOMAIN/soap", wssec.FromClassic),
	}
}

// soapDeriveKeysCmd is 'iotsafe soap derive-keys': the two keys a suite derives from a
// device's key, as files xmlsec1 takes (--hmackey, --aeskey), for integrators who sign
// and encrypt the classic form themselves.
func soapDeriveKeysCmd() *cobra.Command {
	var keyFile, alg, out string
	c := &cobra.Command{
		Use:   "derive-keys --key-file FILE --out DIR",
		Short: "Write the MAC and encryption keys a suite derives from a device's key (mac.bin, enc.bin, mode 0600) for xmlsec1",
		Long: `Every suite derives its own keys from the device's pre-shared key with HKDF-SHA256
(info "iotsafe wssec mac SUITE" and "iotsafe wssec enc SUITE", no salt; docs/soap.md).
This writes them as raw bytes, DIR/mac.bin and DIR/enc.bin (mode 0600), which xmlsec1
takes as --hmackey:KEYID mac.bin and --aeskey:KEYID enc.bin to sign and encrypt the
classic form ('iotsafe soap from-classic' then makes it compact for the hub). They are
as secret as the device's key.`,
		Example: "  iotsafe soap derive-keys --key-file dev42.soapkey --alg aes128-gcm --out keys/",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || out == "" {
				return errors.New("--key-file and --out are required")
			}
			b, err := os.ReadFile(keyFile)
			if err != nil {
				return err
			}
			k, err := wssec.ParseKey(strings.TrimSpace(string(b)))
			if err != nil {
				return fmt.Errorf("%s: %w", keyFile, err)
			}
			s, err := wssec.SuiteByName(alg)
			if err != nil {
				return err
			}
			d, err := s.Derive(k)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return err
			}
			for name, key := range map[string][]byte{"mac.bin": d.MAC, "enc.bin": d.Enc} {
				if err := atomicfile.Write(filepath.Join(out, name), key, atomicfile.Options{}); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %s, suite %s: %s (MAC, %d bytes) and %s (encryption, %d bytes), mode 0600\n",
				k.ID, s.Name, filepath.Join(out, "mac.bin"), len(d.MAC), filepath.Join(out, "enc.bin"), len(d.Enc))
			return nil
		},
	}
	c.Flags().StringVar(&keyFile, "key-file", "", "the device's key, KEYID:BASE64 (as 'device soap-key rotate --out' writes it)")
	c.Flags().StringVar(&alg, "alg", wssec.DefaultSuite, "algorithm suite: "+strings.Join(wssec.SuiteNames(), ", "))
	c.Flags().StringVar(&out, "out", "", "folder for mac.bin and enc.bin")
	return c
}

// readInput reads the file named by args[0], or standard input for "-" or no argument,
// within the largest message a receiver takes.
func readInput(cmd *cobra.Command, args []string) ([]byte, string, error) {
	name, in := "standard input", cmd.InOrStdin()
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		name, in = args[0], f
	}
	b, err := io.ReadAll(io.LimitReader(in, int64(wssec.DefaultLimits.MaxBytes)+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > wssec.DefaultLimits.MaxBytes {
		return nil, "", fmt.Errorf("%s: larger than %d bytes, the most a message may be", name, wssec.DefaultLimits.MaxBytes)
	}
	return b, name, nil
}
