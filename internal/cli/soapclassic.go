package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

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
