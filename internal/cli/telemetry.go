package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
)

func deviceTokenCmd(g *globals) *cobra.Command {
	var expires time.Duration
	c := &cobra.Command{
		Use:   "token NAME",
		Short: "Issue a refresh token for a device's REST API access (printed once)",
		Long: `Issue a refresh token for a device. The device exchanges it for 30-second access tokens
at POST /api/rest/token/refresh. It works until it expires, or until the device is revoked
or removed (then at once); rotating the signing key ('iotsafe jwt rotate') keeps it valid.`,
		Example: `  iotsafe device token dev42 --expires 720h`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			reg, cfg, err := g.openRegistry(ctx)
			if err != nil {
				return err
			}
			defer reg.Close()
			st, err := deviceState(ctx, reg, args[0])
			if err != nil {
				return err
			}
			if st.Revoked {
				return fmt.Errorf("device %s is revoked: its tokens would be refused", st.Name)
			}
			keys, note, err := hub.TokenKeys(ctx, &cfg, g.data, reg)
			if err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", note)
			}
			tokens, _, err := authn.OpenStore(ctx, keys, cfg.JWT)
			if err != nil {
				return err
			}
			if err := reg.AddEvent(ctx, registry.Event{Device: st.Name, Kind: registry.EventTokenIssued, Detail: "refresh token issued by 'iotsafe device token'"}); err != nil {
				return err
			}
			secrets, err := reg.DeviceSecretHashes(ctx)
			if err != nil {
				return err
			}
			// Bound to the device's current secret: 'iotsafe device secret' ends it.
			tok, exp, err := tokens.Issue(authn.Refresh, authn.KindDevice, st.Name, st.Gen(), devicedir.SecretStamp(secrets[st.Name]), expires)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "refresh token of %s, valid until %s: keep it now, it is not shown again\n", st.Name, exp.UTC().Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().DurationVar(&expires, "expires", 0, "lifetime, e.g. 720h; 0 means jwt.refresh_ttl (720h unless configured), at most jwt.max_refresh_ttl")
	return c
}

func deviceState(ctx context.Context, reg *registry.Registry, name string) (registry.DeviceState, error) {
	states, err := reg.DeviceStates(ctx)
	if err != nil {
		return registry.DeviceState{}, err
	}
	for _, s := range states {
		if s.Name == name {
			return s, nil
		}
	}
	return registry.DeviceState{}, fmt.Errorf("no device %q: enroll it first with 'iotsafe device add %s'", name, name)
}

func jwtCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "jwt", Short: "The REST API's token signing keys"}
	var retireNow bool
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Sign new tokens with a new key; tokens of the old one stay valid until they expire",
		Long: `Add a new signing key (of jwt.algorithm) and retire the current one: new tokens carry the
new key id, and the old key keeps verifying the tokens it signed for at most
jwt.max_refresh_ttl. A running hub picks the new key up within a second; with a
PostgreSQL registry the keys are the registry's, and every hub of it does.

With --retire-now every older key is dropped at once, for a key that leaked: every token
it signed stops working within a second, so devices and accounts must log in again
(devices with their secret, 'iotsafe device token' tokens must be issued anew).`,
		Example: "  iotsafe jwt rotate\n  iotsafe jwt rotate --retire-now   # the signing key leaked",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, cfg, err := g.openRegistry(cmd.Context())
			if err != nil {
				return err
			}
			defer reg.Close()
			if err := cfg.JWT.Validate(); err != nil {
				return err
			}
			keys, note, err := hub.TokenKeys(cmd.Context(), &cfg, g.data, reg)
			if err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", note)
			}
			var k *authn.Key
			if retireNow {
				k, err = authn.RetireNow(cmd.Context(), keys, cfg.JWT.Algorithm)
			} else {
				k, err = authn.RotateIn(cmd.Context(), keys, cfg.JWT.Algorithm, cfg.JWT.MaxRefreshTTL)
			}
			if err != nil {
				return err
			}
			detail, said := "new signing key "+k.ID+" ("+k.Alg+")", "earlier keys verify their tokens until those expire"
			if retireNow {
				detail, said = detail+"; every earlier key retired at once", "every earlier key is retired now: its tokens no longer verify"
			}
			if err := reg.AddEvent(cmd.Context(), registry.Event{Kind: "jwt_key_rotated", Detail: detail}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "new signing key %s (%s); %s\n", k.ID, k.Alg, said)
			return nil
		},
	}
	rotate.Flags().BoolVar(&retireNow, "retire-now", false, "drop every older key at once (a leaked key): its tokens stop working")
	c.AddCommand(rotate)
	return c
}
