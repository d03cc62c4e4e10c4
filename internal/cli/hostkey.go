package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/registry"
)

func hostkeyCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "hostkey",
		Short: "Rotate the hub's SSH host key without locking devices out",
		Long: `Devices trust the hub by its host key. A rotation gives them time to learn the new one
before the hub signs with it:

  1. 'iotsafe hostkey add' creates a next key. The hub announces its keys to devices
     (OpenSSH's hostkeys-00@openssh.com) and proves it holds the next one when a device
     asks: OpenSSH clients with UpdateHostKeys=yes and iotsafe agents with --known-hosts
     add it to their known_hosts, and the registry records each device that did.
  2. 'iotsafe hostkey list --pending' shows which devices have not learned it yet.
     Devices pinned with --hub-key, dbclient (Dropbear) and gateways' upstream.hub_key
     learn nothing by themselves: add the next fingerprint to their pin.
  3. With the hub stopped, 'iotsafe hostkey promote' makes the next key the signing key
     and deletes the old private key. After the start, the hub tells the devices
     the old key is gone, and the same clients drop it from their known_hosts.`,
	}
	c.AddCommand(hostkeyListCmd(g), hostkeyAddCmd(g), hostkeyDropCmd(g), hostkeyPromoteCmd(g))
	return c
}

// keyProgress is how far devices are with one next or retired key.
type keyProgress struct {
	hostkey.Entry
	Devices int `json:"devices"` // enrolled, not revoked, with a session of their own (not behind a gateway)
	// Next key: Learned proved it, Announced were told but did not ask for a proof;
	// retired key: Told were sent the keys without it.
	Learned   int            `json:"learned,omitempty"`
	Announced int            `json:"announced,omitempty"`
	Told      int            `json:"told,omitempty"`
	Pending   []pendingEntry `json:"pending,omitempty"`
}

// pendingEntry is a device that has not learned a next key (or not been told of a
// retired one).
type pendingEntry struct {
	Device   string     `json:"device"`
	State    string     `json:"state"` // announced, or "not reached" (no session since)
	LastSeen *time.Time `json:"last_seen,omitempty"`
}

func (g *globals) hostKeyProgress(cmd *cobra.Command) ([]keyProgress, error) {
	entries, err := hostkey.List(g.data)
	if err != nil {
		return nil, err
	}
	out := make([]keyProgress, len(entries))
	var fps []string
	for i, e := range entries {
		out[i].Entry = e
		if e.State != "signing" {
			fps = append(fps, e.Fingerprint)
		}
	}
	if len(fps) == 0 {
		return out, nil
	}
	err = g.withRegistry(cmd, func(reg *registry.Registry) error {
		devs, err := reg.Devices(cmd.Context())
		if err != nil {
			return err
		}
		notes, err := reg.HostKeyNotes(cmd.Context(), fps)
		if err != nil {
			return err
		}
		state := map[[2]string]string{}
		for _, n := range notes {
			state[[2]string{n.Device, n.Fingerprint}] = n.State
		}
		for i := range out {
			p := &out[i]
			if p.State == "signing" {
				continue
			}
			for _, d := range devs {
				if d.Revoked() || d.Via != "" {
					continue
				}
				p.Devices++
				st := state[[2]string{d.Name, p.Fingerprint}]
				switch {
				case p.State == "next" && st == registry.HostKeyProven:
					p.Learned++
					continue
				case p.State == "retired" && st == registry.HostKeyWithdrawn:
					p.Told++
					continue
				case st == registry.HostKeyAnnounced:
					p.Announced++
				default:
					st = "not reached"
				}
				p.Pending = append(p.Pending, pendingEntry{Device: d.Name, State: st, LastSeen: d.LastSeen})
			}
		}
		return nil
	})
	return out, err
}

func hostkeyListCmd(g *globals) *cobra.Command {
	var pending bool
	var outFmt *output
	c := &cobra.Command{
		Use:   "list",
		Short: "The hub's host keys (signing, next, retired) and how many devices learned the next one",
		Example: `  iotsafe hostkey list
  iotsafe hostkey list --pending     # the devices that have not learned the next key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			progress, err := g.hostKeyProgress(cmd)
			if err != nil {
				return err
			}
			if !pending {
				for i := range progress {
					progress[i].Pending = nil
				}
			}
			if outFmt.structured() {
				return outFmt.print(cmd.OutOrStdout(), progress)
			}
			if len(progress) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no host keys in %s: the hub creates them at its first start\n", g.data)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tSTATE\tFINGERPRINT\tSINCE\tDEVICES")
			for _, p := range progress {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Kind, p.State, p.Fingerprint, p.Since.Local().Format("2006-01-02 15:04"), describeProgress(p))
			}
			tw.Flush()
			for _, p := range progress {
				if len(p.Pending) == 0 {
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s key %s: not yet %s by\n", p.State, p.Fingerprint, map[string]string{"next": "learned", "retired": "dropped"}[p.State])
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  DEVICE\tSTATE\tLAST SEEN")
				for _, d := range p.Pending {
					seen := "never"
					if d.LastSeen != nil {
						seen = d.LastSeen.Local().Format("2006-01-02 15:04")
					}
					fmt.Fprintf(tw, "  %s\t%s\t%s\n", d.Device, d.State, seen)
				}
				tw.Flush()
			}
			return nil
		},
	}
	c.Flags().BoolVar(&pending, "pending", false, "list the devices that have not learned the next key (or not been told a retired one is gone)")
	outFmt = addOutput(c)
	return c
}

func describeProgress(p keyProgress) string {
	switch p.State {
	case "next":
		s := fmt.Sprintf("learned by %d of %d", p.Learned, p.Devices)
		if p.Announced > 0 {
			s += fmt.Sprintf("; %d announced, no proof asked (UpdateHostKeys off, Dropbear, or --hub-key)", p.Announced)
		}
		return s
	case "retired":
		return fmt.Sprintf("told it is gone: %d of %d", p.Told, p.Devices)
	}
	return ""
}

// rotatedKind is the key type to rotate: --type, or by default the hub's only one, or
// ed25519 among several.
func (g *globals) rotatedKind(kind string) (string, error) {
	if kind != "" {
		return kind, nil
	}
	entries, err := hostkey.List(g.data)
	if err != nil {
		return "", err
	}
	var signing []string
	for _, e := range entries {
		if e.State == "signing" {
			signing = append(signing, e.Kind)
		}
	}
	switch {
	case len(signing) == 0:
		return "", fmt.Errorf("no host key in %s: start the hub once, or give --data", g.data)
	case len(signing) > 1 && !slices.Contains(signing, "ed25519"):
		return "", fmt.Errorf("the hub signs with %s: say which with --type", strings.Join(signing, ", "))
	case len(signing) > 1:
		return "ed25519", nil
	}
	return signing[0], nil
}

// reloadHostKeys tells a running hub that its next keys changed.
func (g *globals) reloadHostKeys(cmd *cobra.Command) {
	_, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpReloadHostKeys})
	switch {
	case errors.Is(err, admin.ErrHubNotRunning):
		fmt.Fprintln(cmd.OutOrStdout(), "no hub answered on the admin socket: the hub reads it when it starts")
	case err != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the running hub did not take the change (%v): restart it to apply it\n", err)
	default:
		fmt.Fprintln(cmd.OutOrStdout(), "the running hub took it: live sessions are told now, new ones as they start")
	}
}

func hostkeyAddCmd(g *globals) *cobra.Command {
	var kind string
	c := &cobra.Command{
		Use:   "add",
		Short: "Create the next host key and announce it to devices (it signs nothing until promoted)",
		Long: `Creates the next host key of a type (mode 0600) beside the signing key. The hub
announces it to devices at once and proves it holds it when they ask; nothing changes
for a device that does not take announcements. A retired key of an earlier rotation is
forgotten (the announcements leave it out too).`,
		Example: `  iotsafe hostkey add
  iotsafe hostkey list --pending`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := g.rotatedKind(kind)
			if err != nil {
				return err
			}
			pub, err := hostkey.AddNext(g.data, k)
			if err != nil {
				return err
			}
			fp := ssh.FingerprintSHA256(pub)
			g.recordEvent(cmd, registry.Event{Kind: registry.EventHostKey, Detail: fmt.Sprintf("added next %s key %s", k, fp)})
			fmt.Fprintf(cmd.OutOrStdout(), "next host key %s %s\n", pub.Type(), fp)
			g.reloadHostKeys(cmd)
			fmt.Fprintf(cmd.OutOrStdout(), "devices pinned by fingerprint (agent --hub-key, upstream.hub_key) learn nothing by themselves: pin %s beside the current key\n", fp)
			fmt.Fprintln(cmd.OutOrStdout(), "next: 'iotsafe hostkey list --pending' until the devices learned it, then stop the hub and run 'iotsafe hostkey promote'")
			return nil
		},
	}
	c.Flags().StringVar(&kind, "type", "", "key type: "+strings.Join(hostkey.Kinds(), ", ")+" (default: the hub's only one, or ed25519)")
	return c
}

func hostkeyDropCmd(g *globals) *cobra.Command {
	var kind string
	c := &cobra.Command{
		Use:   "drop",
		Short: "Delete the next host key, ending a rotation before its promotion",
		Long: `Deletes the next host key. Devices that learned it keep it in their known_hosts
until a later announcement leaves it out (the next rotation's, or a promotion's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := g.rotatedKind(kind)
			if err != nil {
				return err
			}
			pub, err := hostkey.DropNext(g.data, k)
			if err != nil {
				return err
			}
			fp := ssh.FingerprintSHA256(pub)
			g.recordEvent(cmd, registry.Event{Kind: registry.EventHostKey, Detail: fmt.Sprintf("dropped next %s key %s", k, fp)})
			fmt.Fprintf(cmd.OutOrStdout(), "dropped next host key %s %s\n", pub.Type(), fp)
			g.reloadHostKeys(cmd)
			return nil
		},
	}
	c.Flags().StringVar(&kind, "type", "", "key type: "+strings.Join(hostkey.Kinds(), ", ")+" (default: the hub's only one, or ed25519)")
	return c
}

func hostkeyPromoteCmd(g *globals) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "promote",
		Short: "Sign with the next host key from now on (the hub must be stopped)",
		Long: `Makes each next host key its type's signing key and deletes the old private key
(its public part stays, so the hub can tell devices it is gone). The hub must be
stopped. A device that has not learned the next key will refuse the hub after this,
so promote refuses while any has not, unless --force; 'iotsafe hostkey list --pending'
names them.`,
		Example: `  systemctl stop iotsafe-hub && iotsafe hostkey promote && systemctl start iotsafe-hub`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := os.Stat(g.data); err != nil {
				return fmt.Errorf("no data folder %s (is --data right?): %w", g.data, err)
			}
			lock, err := hub.LockData(g.data)
			if err != nil {
				return err
			}
			defer lock.Release()
			progress, err := g.hostKeyProgress(cmd)
			if err != nil {
				return err
			}
			var behind []string
			for _, p := range progress {
				if p.State == "next" && p.Learned < p.Devices {
					behind = append(behind, fmt.Sprintf("%s key %s: learned by %d of %d devices", p.Kind, p.Fingerprint, p.Learned, p.Devices))
				}
			}
			if len(behind) > 0 && !force {
				return fmt.Errorf("not every device learned the next key (%s); they would refuse the hub after the promotion. 'iotsafe hostkey list --pending' names them: update their pins, or promote anyway with --force", strings.Join(behind, "; "))
			}
			ps, err := hostkey.Promote(g.data)
			if err != nil {
				return err
			}
			for _, p := range ps {
				detail := fmt.Sprintf("promoted %s key %s, retired %s", p.Kind, ssh.FingerprintSHA256(p.Signing), ssh.FingerprintSHA256(p.Retired))
				if len(behind) > 0 {
					detail += " (forced: " + strings.Join(behind, "; ") + ")"
				}
				g.recordEvent(cmd, registry.Event{Kind: registry.EventHostKey, Detail: detail})
				fmt.Fprintf(cmd.OutOrStdout(), "host key %s %s (signing from the hub's next start)\nretired  %s %s (private key deleted)\n",
					p.Signing.Type(), ssh.FingerprintSHA256(p.Signing), p.Retired.Type(), ssh.FingerprintSHA256(p.Retired))
			}
			fmt.Fprintln(cmd.OutOrStdout(), "start the hub: it tells devices the retired key is gone as they connect ('iotsafe hostkey list')")
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "promote although some devices have not learned the next key (they will refuse the hub)")
	return c
}
