package labcmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/tlsbench"
)

func benchTLSCmd() *cobra.Command {
	var o tlsbench.Options
	var out, link string
	c := &cobra.Command{
		Use:   "tls",
		Short: "TLS 1.3 and DTLS 1.2 (paper 003): full handshake, resumption and PSK; Go, OpenSSL, wolfSSL, pion",
		Long: `The average time per connection over K subsequent connections (paper 003, fig. 5) for
TLS 1.3 full handshakes, session resumption (tickets) and external PSK (psk_ke,
psk_dhe_ke), with Go's crypto/tls (what the hub uses), OpenSSL 3.0 and wolfSSL 5.5
(small C helpers the bench builds with the system's compiler against libssl-dev and
libwolfssl-dev), and DTLS 1.2 (no DTLS 1.3 exists here) with pion/dtls, with and without
connection IDs ("pion+cid"), and with wolfSSL ("wolfssl-dtls": Debian's build has no
connection IDs), each as client and server, on loopback; and Go's TLS 1.2 ("go-tls12",
which the hub's listeners accept too: its resumption is an abbreviated handshake). Go has no external PSK: those cells say so. The target (issue 15):
with Go's TLS, resumption at least twice the connection rate of a full handshake.

Then figs. 3 and 4: for each TLS 1.3 suite (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305)
x group (X25519, P-256, P-384, P-521, X25519MLKEM768), full handshakes one after the
other for --window (15 s, as the paper): connections made and bytes per connection, with
Go, OpenSSL and wolfSSL; what a library cannot do (Go choosing its TLS 1.3 suite,
ML-KEM in OpenSSL 3.0 and wolfSSL 5.5) is listed with why. And fig. 2: the crypto
primitives' speed, Go's in process, OpenSSL's with openssl speed and wolfCrypt's
through the helper: AES-GCM, ChaCha20-Poly1305 and SHA-256 in MB/s on 1 KiB buffers, X25519, ECDH P-256/384/521 and
ML-KEM-768 per second, ECDSA P-256, Ed25519 and RSA-2048 signatures and verifications
per second. And fig. 6: messages of 100 to 10,000 bytes echoed over one connection for
--window (Go, OpenSSL, wolfSSL): messages/s, MB/s each way, bytes TLS adds per message.

Results go to --out (default ./bench-results/tls-TIMESTAMP/): connections.csv,
suites_groups.csv, payload.csv, primitives.csv, environment.json, summary.json
(schema: docs/bench.md) and report.html. --quick checks the harness. --link 802154 runs
fig. 5 with every implementation across the emulated 802.15.4 link (K = 10, one
repetition unless given; the C helpers through ip netns exec, over IPv6) and reports each
mode's frames, bytes on the air, airtime and radio energy per connection.`,
		Example: `  iotsafe bench tls --quick
  iotsafe bench tls                          # K = 10, 100, 250, 500, 1000; 3 repetitions
  iotsafe bench tls --impls openssl --modes resume,psk_ke --k 1000 --reps 5
  sudo iotsafe bench tls --link 802154 --impls go,pion,wolfssl-dtls,openssl   # bytes and frames per handshake mode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Link, err = linkProfile(link); err != nil {
				return err
			}
			return runLab(cmd, "tls", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return tlsbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "K = 5 and 20, one repetition, 150 ms windows: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/tls-TIMESTAMP)")
	fl.IntSliceVar(&o.K, "k", nil, "subsequent connections per run (default 10,100,250,500,1000)")
	fl.StringSliceVar(&o.Impls, "impls", nil, "go, openssl, wolfssl (TLS 1.3), go-tls12 (Go's TLS 1.2), pion, pion+cid, wolfssl-dtls (DTLS 1.2) (default all)")
	fl.StringSliceVar(&o.Modes, "modes", nil, "full, resume, psk_ke, psk_dhe_ke, full_mlkem (X25519MLKEM768; Go only) (default all)")
	fl.IntVar(&o.Reps, "reps", 0, "runs per point, medians reported (default 3)")
	fl.DurationVar(&o.Window, "window", 0, "time of each suites x groups cell (figs. 3, 4; default 15s as the paper)")
	fl.BoolVar(&o.NoSuites, "no-suites", false, "skip the suites x groups experiment")
	fl.BoolVar(&o.NoPrimitives, "no-primitives", false, "skip the crypto primitives (fig. 2)")
	fl.BoolVar(&o.NoPayload, "no-payload", false, "skip throughput against payload (fig. 6)")
	fl.StringVar(&link, "link", "loopback", "run fig. 5 across an emulated link (802154, wifi, lte, ethernet; root), with each mode's frames, bytes on the air, airtime and radio energy per connection")
	return c
}
