package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// tokenCmd is 'iotsafe token': join tokens, with which devices enrol keys they make
// themselves.
func tokenCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "token",
		Short: "Join tokens: devices enrol keys they make themselves (create, list, revoke)",
		Long: `A join token lets a batch of devices enrol themselves: each makes its own key pair (the
private key never leaves it) and enrols the public key under a name the token allows,
with the token's profile, over SSH ('iotsafe-agent join', or stock ssh: docs/enrollment.md).
The hub keeps only the token's hash; every use and refusal is in the audit log.`,
	}
	c.AddCommand(tokenCreateCmd(g), tokenListCmd(g), tokenRevokeCmd(g))
	return c
}

func tokenCreateCmd(g *globals) *cobra.Command {
	var prof, names, label, approve string
	var uses int
	var ttl time.Duration
	var outFmt *output
	c := &cobra.Command{
		Use:   "create --names PATTERN",
		Short: "Make a join token for devices named PATTERN (shown once)",
		Example: `  iotsafe token create --names 'sensor-*' --profile sensor --uses 500 --ttl 24h
  iotsafe token create --names cam-7 --label 'replacement camera'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := registry.ValidNamePattern(names); err != nil {
				return fmt.Errorf("--names: %v", err)
			}
			if uses < 1 || uses > 1_000_000 {
				return fmt.Errorf("--uses %d: want 1 to 1000000 devices", uses)
			}
			if ttl <= 0 || ttl > 365*24*time.Hour {
				return fmt.Errorf("--ttl %s: want a duration up to a year (8760h)", ttl)
			}
			if approve != registry.ApproveAuto && approve != registry.ApproveManual {
				return fmt.Errorf("--approve %q: want auto or manual", approve)
			}
			if !profile.ValidName(prof) {
				return fmt.Errorf("--profile %q: not a profile name", prof)
			}
			token, hash, err := credential.NewToken()
			if err != nil {
				return err
			}
			expires := time.Now().Add(ttl).UTC().Truncate(time.Second)
			a, err := g.change(cmd, control.AddJoinToken{Hash: hash, Label: label, Profile: prof, Names: names, Uses: uses, Expires: expires, Approve: approve})
			if err != nil {
				return err
			}
			hub, fp := g.joinTarget()
			if outFmt.structured() {
				return outFmt.print(cmd.OutOrStdout(), map[string]any{"id": a.JoinTokenID, "token": token, "names": names,
					"profile": prof, "uses": uses, "approve": approve, "expires_at": expires, "hub": hub, "hub_key": fp})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "join token %d: %d devices named %s, profile %s, until %s (shown once: the hub keeps its hash):\n  %s\n",
				a.JoinTokenID, uses, names, prof, expires.Format(time.RFC3339), token)
			fmt.Fprintf(w, "On each device (it makes its own key):\n  iotsafe-agent join --hub %s --hub-key %s --token %s --name NAME\n", hub, fp, token)
			if approve == registry.ApproveManual {
				fmt.Fprintln(w, "Each device then waits for you: 'iotsafe device approve NAME' (or 'device reject NAME'); 'iotsafe device list' shows them pending.")
			}
			return nil
		},
	}
	c.Flags().StringVar(&names, "names", "", "the device names it enrols: a name or a shell pattern such as 'sensor-*'")
	c.Flags().StringVar(&prof, "profile", profile.DefaultName, "the profile of the devices it enrols")
	c.Flags().IntVar(&uses, "uses", 1, "how many devices it enrols")
	c.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long it can be used")
	c.Flags().StringVar(&label, "label", "", "a note for 'token list' (a batch, an order)")
	c.Flags().StringVar(&approve, "approve", registry.ApproveAuto, "auto: a device joins and connects at once; manual: it waits for 'iotsafe device approve NAME'")
	outFmt = addOutput(c)
	return c
}

// joinTarget is where devices join: the running hub's SSH address (or the configured
// one) and its signing host key's fingerprint, as the agent pins it.
func (g *globals) joinTarget() (addr, fingerprint string) {
	addr, fingerprint = "HOST:PORT", "FINGERPRINT"
	if h := g.runningHub(); h != nil && h.Listeners["ssh"] != "" {
		addr = h.Listeners["ssh"]
	} else if cfg, err := g.loadConfig(); err == nil && cfg.SSH.Listen != "" {
		addr = cfg.SSH.Listen
	}
	if entries, err := hostkey.List(g.data); err == nil {
		for _, e := range entries {
			if e.State == "signing" {
				return addr, e.Fingerprint
			}
		}
	}
	return addr, fingerprint
}

func tokenListCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "list",
		Short: "List join tokens (never the tokens themselves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				toks, err := reg.JoinTokens(cmd.Context())
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), toks)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAMES\tPROFILE\tAPPROVE\tUSED\tLEFT\tSTATE\tLABEL")
				now := time.Now()
				for _, t := range toks {
					state := "until " + t.ExpiresAt.Format(time.RFC3339)
					switch {
					case t.RevokedAt != nil:
						state = "revoked"
					case !t.ExpiresAt.After(now):
						state = "expired"
					case t.UsesLeft == 0:
						state = "used up"
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", t.ID, t.Pattern, t.Profile, t.Approve, t.Used, t.UsesLeft, state, t.Label)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func tokenRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Refuse a join token from now on (the devices it enrolled stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(strings.TrimSpace(args[0]), 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("%q: want a token id, as 'iotsafe token list' shows", args[0])
			}
			if _, err := g.change(cmd, control.RevokeJoinToken{ID: id}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "join token %d revoked\n", id)
			return nil
		},
	}
}

// deviceApproveCmd is 'iotsafe device approve': let in a device that joined pending.
func deviceApproveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "approve NAME",
		Short:   "Let in a device that joined with a token of --approve manual (it connects at its next try)",
		Example: "  iotsafe device approve sensor-0042",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.change(cmd, control.ApproveDevice{Device: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s approved: it connects at its next try\n", args[0])
			return nil
		},
	}
}

// deviceRejectCmd is 'iotsafe device reject': remove a device that joined pending.
func deviceRejectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "reject NAME",
		Short:   "Remove a device that joined with a token of --approve manual and waits (its name is free again)",
		Example: "  iotsafe device reject sensor-0042",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var pending bool
			if err := g.withRegistry(cmd, func(reg *registry.Registry) error {
				d, err := reg.Device(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				pending = d.RevokedAt != nil && registry.IsPending(d.RevokeWhy)
				return nil
			}); err != nil {
				return err
			}
			if !pending {
				return fmt.Errorf("device %s is not waiting for approval: 'iotsafe device revoke' or 'device remove' it", args[0])
			}
			if _, err := g.change(cmd, control.RemoveDevice{Device: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s rejected and removed\n", args[0])
			return nil
		},
	}
}
