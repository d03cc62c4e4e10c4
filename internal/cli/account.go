package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
)

func accountCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "account",
		Short: "Front-door accounts: people who reach device services over HTTPS",
		Long: `Front-door accounts are kept apart from the operating system's users. An account logs
in with HTTP Basic, a Bearer token, or the login page, and reaches what 'iotsafe grant
--account NAME ...' allows.`,
	}
	c.AddCommand(accountAddCmd(g), accountPasswdCmd(g), accountListCmd(g), accountRemoveCmd(g), accountLogoutCmd(g),
		accountTokenCmd(g), accountTokensCmd(g), accountRevokeTokenCmd(g))
	return c
}

// readPassword asks twice on a terminal, or reads one line from standard input.
func readPassword(cmd *cobra.Command, fromStdin bool) (string, error) {
	in := cmd.InOrStdin()
	if fromStdin {
		line, err := bufio.NewReader(io.LimitReader(in, credential.MaxPasswordLen+2)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		pw := strings.TrimRight(line, "\r\n")
		return pw, credential.CheckPasswordPolicy(pw)
	}
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return "", errors.New("standard input is not a terminal: use --password-stdin to pipe the password")
	}
	fmt.Fprint(cmd.ErrOrStderr(), "Password: ")
	a, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(cmd.ErrOrStderr())
	if err != nil {
		return "", err
	}
	if err := credential.CheckPasswordPolicy(string(a)); err != nil {
		return "", err
	}
	fmt.Fprint(cmd.ErrOrStderr(), "Again: ")
	b, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(cmd.ErrOrStderr())
	if err != nil {
		return "", err
	}
	if string(a) != string(b) {
		return "", errors.New("the passwords differ")
	}
	return string(a), nil
}

func accountAddCmd(g *globals) *cobra.Command {
	var fromStdin, noPassword bool
	c := &cobra.Command{
		Use:   "add NAME",
		Short: "Create an account (asks for its password)",
		Example: `  iotsafe account add alice
  printf '%s\n' "$PW" | iotsafe account add bob --password-stdin
  iotsafe account add ci-bot --no-password && iotsafe account token ci-bot`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hash := ""
			if !noPassword {
				pw, err := readPassword(cmd, fromStdin)
				if err != nil {
					return err
				}
				if hash, err = credential.HashPassword(pw); err != nil {
					return err
				}
			}
			if _, err := g.change(cmd, control.AddAccount{Name: args[0], PasswordHash: hash}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "account %s added; give it devices with 'iotsafe grant --account %s DEVICE ALIAS'\n", args[0], args[0])
			return nil
		},
	}
	c.Flags().BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of standard input")
	c.Flags().BoolVar(&noPassword, "no-password", false, "no password: the account logs in with API tokens only")
	return c
}

func accountPasswdCmd(g *globals) *cobra.Command {
	var fromStdin bool
	c := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set an account's password",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := readPassword(cmd, fromStdin)
			if err != nil {
				return err
			}
			hash, err := credential.HashPassword(pw)
			if err != nil {
				return err
			}
			if _, err := g.change(cmd, control.SetPassword{Account: args[0], PasswordHash: hash}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "password of %s changed\n", args[0])
			return nil
		},
	}
	c.Flags().BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of standard input")
	return c
}

func accountListCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "list",
		Short: "List accounts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				as, err := reg.Accounts(cmd.Context())
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), as)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ACCOUNT\tPASSWORD\tTOKENS\tSESSIONS\tCREATED")
				for _, a := range as {
					pw := "no"
					if a.HasPass {
						pw = "set"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", a.Name, pw, a.Tokens, a.Sessions, a.CreatedAt.Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func accountRemoveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Delete an account with its tokens and grants; its sessions end at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.change(cmd, control.RemoveAccount{Account: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "account %s removed\n", args[0])
			return nil
		},
	}
}

func accountLogoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logout NAME",
		Short: "End an account's login-page sessions and REST tokens at once (its password and API tokens stay)",
		Long: `Ends every login-page session of the account and every REST token (JWT, refresh tokens
included) issued to it, on the running hub at once: its browsers and apps must log in
again. The password and API tokens are not touched; 'iotsafe account passwd' (which also
ends the sessions and REST tokens) and 'iotsafe account revoke-token' handle those.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.change(cmd, control.EndLoginSessions{Account: args[0]})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d login session(s) of %s ended\n", a.Ended, args[0])
			return nil
		},
	}
}

func accountTokenCmd(g *globals) *cobra.Command {
	var label string
	var expires time.Duration
	c := &cobra.Command{
		Use:   "token NAME",
		Short: "Create an API token for an account (shown once, stored hashed)",
		Example: `  iotsafe account token alice --label laptop --expires 720h
  curl -H "Authorization: Bearer $TOKEN" https://dev42.devices.example.com/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, hash, err := credential.NewToken()
			if err != nil {
				return err
			}
			var exp *time.Time
			if expires > 0 {
				t := time.Now().Add(expires)
				exp = &t
			}
			a, err := g.change(cmd, control.AddToken{Account: args[0], Label: label, Hash: hash, Expires: exp})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %d for %s: keep it now, it is not shown again (revoke: iotsafe account revoke-token %s %d)\n", a.TokenID, args[0], args[0], a.TokenID)
			return nil
		},
	}
	c.Flags().StringVar(&label, "label", "", "a note saying where the token is used")
	c.Flags().DurationVar(&expires, "expires", 0, "token lifetime, e.g. 720h; 0 means no expiry")
	return c
}

func accountTokensCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "tokens [NAME]",
		Short: "List API tokens (never the tokens themselves)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				ts, err := reg.Tokens(cmd.Context(), name)
				if err != nil {
					return err
				}
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), ts)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tACCOUNT\tLABEL\tCREATED\tSTATE")
				for _, t := range ts {
					state := "active"
					switch {
					case t.RevokedAt != nil:
						state = "revoked " + t.RevokedAt.Format(time.RFC3339)
					case t.ExpiresAt != nil && !t.Usable(time.Now()):
						state = "expired " + t.ExpiresAt.Format(time.RFC3339)
					case t.ExpiresAt != nil:
						state = "expires " + t.ExpiresAt.Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", t.ID, t.Account, t.Label, t.CreatedAt.Format(time.RFC3339), state)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func accountRevokeTokenCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke-token NAME ID",
		Short: "Revoke an API token; it is refused at once",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil {
				return fmt.Errorf("token ID %q: a number from 'iotsafe account tokens %s'", args[1], args[0])
			}
			if _, err := g.change(cmd, control.RevokeToken{Account: args[0], ID: id}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %d of %s revoked\n", id, args[0])
			return nil
		},
	}
}
