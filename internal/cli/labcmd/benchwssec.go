package labcmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/wssecbench"
)

func benchWSSecCmd() *cobra.Command {
	var o wssecbench.Options
	var out, link string
	c := &cobra.Command{
		Use:   "wssec",
		Short: "SOAP with WS Compact Security and WS Security Records against TLS (paper 001): sizes, round trips, deflate, 802.15.4",
		Long: `Paper 001's tables: the three cases (a 5-byte string, a 50-byte string, ten 5-byte
strings) as unsecured SOAP, over TLS 1.2 (AES-128-CBC-SHA, AES-128-GCM) and TLS 1.3, and
secured with WS Compact Security (csec-*) and WS Security Records (secrec-*) with every
suite (RC4 too, as a lab row only). For each: the envelope sizes and the bytes on the
wire (table I, II, IV), round-trip medians over a kept-alive connection with the
handshake excluded (tables III, V), what one exchange costs on the 802.15.4 link model
(frames, bytes on the air, radio energy), and deflate levels 0-9 x chunk sizes on the
HTTP body (table VI). TLS record compression no longer exists: the report says so.
Targets (issue 16): WS-SecRec with AES-GCM within 1.2x TLS 1.3's round trip and 2x its
bytes, WS-CSec within 1.5x WS-SecRec's round trip.

Results go to --out (default ./bench-results/wssec-TIMESTAMP/): rtt.csv, sizes.csv,
deflate.csv, environment.json, summary.json (schema: docs/bench.md) and report.html.
--link 802154 runs the exchanges over the lab's emulated 802.15.4 link (root: the client
in one network namespace, the server in another) and counts their frames, bytes on the
air and airtime there; on loopback those come from the link model. --quick checks the
harness.`,
		Example: `  iotsafe bench wssec --quick
  iotsafe bench wssec                                    # every variant, 1000 round trips each
  iotsafe bench wssec --variants tls1.3-aes128-gcm,secrec-aes128-gcm,csec-aes128-gcm --no-deflate
  sudo iotsafe bench wssec --link 802154 --no-deflate   # 100 round trips each over 802.15.4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Link, err = linkProfile(link); err != nil {
				return err
			}
			return runLab(cmd, "wssec", out, "", func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error {
				o.Progress = p
				return wssecbench.Run(ctx, b, o, out, cmd.OutOrStdout())
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.Quick, "quick", false, "five variants, 20 round trips, two deflate levels: checks the harness")
	fl.StringVar(&out, "out", "", "results folder (default ./bench-results/wssec-TIMESTAMP)")
	fl.StringSliceVar(&o.Variants, "variants", nil, "soap, tls1.2-aes128-cbc-sha, tls1.2-aes128-gcm, tls1.3-aes128-gcm, csec-SUITE, secrec-SUITE (default all)")
	fl.IntSliceVar(&o.Cases, "cases", nil, "the paper's cases 1, 2, 3 (default all)")
	fl.IntVar(&o.Requests, "requests", 0, "round trips per variant and case (default 1000)")
	fl.IntSliceVar(&o.Levels, "levels", nil, "deflate levels (default 0-9)")
	fl.IntSliceVar(&o.Chunks, "chunks", nil, "deflate chunk sizes (default 1024,2048,4096)")
	fl.BoolVar(&o.NoDeflate, "no-deflate", false, "skip the deflate sweep (table VI)")
	fl.StringVar(&link, "link", "loopback", "loopback, or an emulated link between device and server: 802154, wifi, lte, ethernet (root: two network namespaces)")
	return c
}
