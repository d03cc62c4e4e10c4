package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

func deviceCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "device", Short: "Enroll, list, show, revoke and remove devices"}
	c.AddCommand(deviceAddCmd(g), deviceCertCmd(g), deviceListCmd(g), deviceShowCmd(g), deviceRevokeCmd(g), deviceReinstateCmd(g), deviceRemoveCmd(g), deviceApproveCmd(g), deviceRejectCmd(g), deviceSetGroupsCmd(g),
		deviceSecretCmd(g), deviceTokenCmd(g), deviceSOAPKeyCmd(g), deviceImportCmd(g),
		deviceKeyCmd(g), deviceAgentConfigCmd(g))
	return c
}

func deviceAddCmd(g *globals) *cobra.Command {
	var prof, pubkey, keygen string
	var noKey bool
	var groups []string
	var outFmt *output
	c := &cobra.Command{
		Use:   "add NAME",
		Short: "Enroll a device with its public key and allocate its protected sockets",
		Example: `  iotsafe device add dev1 --keygen ./keys          # creates ./keys/dev1 and ./keys/dev1.pub
  iotsafe device add cam7 --pubkey cam7.pub --profile camera.yaml
  iotsafe device add dev9 --no-key                 # it logs in with a certificate ('iotsafe ca sign')`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			given := 0
			for _, set := range []bool{pubkey != "", keygen != "", noKey} {
				if set {
					given++
				}
			}
			if given != 1 {
				return errors.New("give exactly one of --pubkey FILE, --keygen DIR or --no-key")
			}
			// Before anything is written: the name becomes a file name under --keygen.
			if err := checkDeviceName(name); err != nil {
				return err
			}
			ctx := cmd.Context()
			reg, cfg, err := g.openRegistry(ctx)
			if err != nil {
				return err
			}
			defer reg.Close()
			if err := hub.CheckFreeSpace(g.data, cfg.Audit.MinFreeMiB); err != nil {
				return err
			}
			profName, err := resolveProfile(ctx, reg, prof)
			if err != nil {
				return err
			}
			var key ssh.PublicKey
			var keyFile, keyLine string
			switch {
			case pubkey != "":
				if key, err = readPublicKey(pubkey); err != nil {
					return err
				}
			case keygen != "":
				if key, keyFile, err = generateDeviceKey(filepath.Join(keygen, name), name); err != nil {
					return err
				}
			}
			if key != nil {
				keyLine = string(ssh.MarshalAuthorizedKey(key))
			}
			a, err := g.change(cmd, control.AddDevice{Name: name, Profile: profName, Key: keyLine, Groups: groups})
			if err != nil {
				if keyFile != "" {
					removeKeyPair(keyFile)
				}
				return err
			}
			d := a.Device
			if outFmt.structured() {
				return outFmt.print(cmd.OutOrStdout(), d)
			}
			w := cmd.OutOrStdout()
			keyNote := "no SSH key: it logs in with a certificate ('iotsafe ca sign " + d.Name + "'), or 'iotsafe device key add' gives it one"
			if len(d.Keys) > 0 {
				keyNote = "key " + d.Keys[0].Fingerprint
			}
			fmt.Fprintf(w, "enrolled %s (profile %s, address %s, %s)\n", d.Name, d.Profile, d.Address, keyNote)
			for _, s := range d.Sockets {
				fmt.Fprintf(w, "  protected socket %-10s %s\n", s.Alias, s.Addr)
			}
			if keyFile != "" {
				fmt.Fprintf(w, "private key written to %s (mode 0600): copy it to the device\n", keyFile)
			}
			return nil
		},
	}
	c.Flags().StringVar(&prof, "profile", profile.DefaultName, "profile NAME from the registry, or a profile FILE (YAML) to store and use")
	c.Flags().StringVar(&pubkey, "pubkey", "", "the device's OpenSSH public key FILE")
	c.Flags().StringVar(&keygen, "keygen", "", "create an ed25519 key pair in DIR (DIR/NAME, DIR/NAME.pub)")
	c.Flags().BoolVar(&noKey, "no-key", false, "enrol without an SSH key: the device logs in with a certificate of a CA the hub trusts ('iotsafe ca sign')")
	c.Flags().StringArrayVar(&groups, "group", nil, "device group (repeatable): 'iotsafe grant ... @GROUP' covers all its devices")
	outFmt = addOutput(c)
	return c
}

// resolveProfile stores a profile given as a file and returns its name.
func resolveProfile(ctx context.Context, reg *registry.Registry, arg string) (string, error) {
	if arg == "" {
		return profile.DefaultName, nil
	}
	if profile.ValidName(arg) {
		if _, err := reg.Profile(ctx, arg); err == nil {
			return arg, nil
		}
		if _, err := os.Stat(arg); err != nil {
			return "", fmt.Errorf("no profile named %q: add it with 'iotsafe profile add FILE' or pass a file", arg)
		}
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	p, err := profile.Parse(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", arg, err)
	}
	if err := reg.PutProfile(ctx, p); err != nil {
		return "", err
	}
	return p.Name, nil
}

func readPublicKey(path string) (ssh.PublicKey, error) {
	k, err := readKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("--pubkey: %w", err)
	}
	return k, nil
}

// checkDeviceName refuses a name the registry would refuse, before any file is written.
func checkDeviceName(name string) error {
	if !profile.ValidName(name) {
		return fmt.Errorf("device name %q: use lower-case letters, digits and '-' (max 63)", name)
	}
	return nil
}

// removeKeyPair deletes a key pair generateDeviceKey created (both files are its own:
// it creates them exclusively), when enrolling it failed.
func removeKeyPair(path string) {
	os.Remove(path)
	os.Remove(path + ".pub")
}

// generateDeviceKey writes a new ed25519 key pair to path (0600) and path.pub, with name
// as the public key's comment, creating path's folder. It never replaces a file: if
// either exists it fails and leaves both as they were.
func generateDeviceKey(path, name string) (ssh.PublicKey, string, error) {
	pub, err := agent.GenerateKeyPair(path, name)
	if err != nil {
		return nil, "", fmt.Errorf("--keygen: %w", err)
	}
	return pub, path, nil
}

func deviceListCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "list",
		Short: "List devices with their status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				devs, err := reg.Devices(cmd.Context())
				if err != nil {
					return err
				}
				hs := g.hubState(cmd, reg)
				if outFmt.structured() {
					out := make([]deviceView, 0, len(devs))
					for _, d := range devs {
						out = append(out, hs.view(d))
					}
					return outFmt.print(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "DEVICE\tPROFILE\tADDRESS\tSTATUS\tVIOLATIONS")
				for _, d := range devs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", d.Name, d.Profile, d.Address, hs.status(d), d.Violations)
				}
				return tw.Flush()
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

type deviceView struct {
	*registry.Device
	Online bool `json:"online"`
	// HeldRevocation: revoked by the running hub in memory only (the registry cannot
	// write); the reason.
	HeldRevocation string `json:"held_revocation,omitempty"`
	// HostKeys is what the device was told of the hub's next and retired host keys
	// during a rotation (iotsafe hostkey).
	HostKeys []deviceHostKey `json:"hub_host_keys,omitempty"`
}

// deviceHostKey is one of the hub's next or retired host keys, as one device knows it.
type deviceHostKey struct {
	State       string     `json:"state"` // next or retired
	Fingerprint string     `json:"fingerprint"`
	Device      string     `json:"device_state"` // proven, announced, withdrawn, or "not reached"
	At          *time.Time `json:"at,omitempty"`
}

// hostKeysOf is what d was told of this data folder's next and retired host keys.
func (g *globals) hostKeysOf(cmd *cobra.Command, reg *registry.Registry, d *registry.Device) []deviceHostKey {
	entries, err := hostkey.List(g.data)
	if err != nil || d.Via != "" {
		return nil
	}
	var out []deviceHostKey
	var fps []string
	for _, e := range entries {
		if e.State != "signing" {
			out = append(out, deviceHostKey{State: e.State, Fingerprint: e.Fingerprint, Device: "not reached"})
			fps = append(fps, e.Fingerprint)
		}
	}
	notes, err := reg.HostKeyNotes(cmd.Context(), fps)
	if err != nil {
		return out
	}
	for _, n := range notes {
		for i := range out {
			if n.Device == d.Name && n.Fingerprint == out[i].Fingerprint {
				at := n.At
				out[i].Device, out[i].At = n.State, &at
			}
		}
	}
	return out
}

// hubState is what the running hub says: online devices (nil when no hub answered) and
// what it holds in memory because the registry cannot write.
type hubState struct {
	online   map[string]bool
	held     map[string]string
	degraded string
	// On a registry several hubs share: this data folder's hub, and the hubs whose
	// lease is valid (a device the registry records at one of them is online there).
	self string
	live map[string]registry.HubInfo
}

// hubState asks the running hub (and the registry, for the other hubs sharing it); a
// degraded hub is reported on standard error.
func (g *globals) hubState(cmd *cobra.Command, reg *registry.Registry) hubState {
	var hs hubState
	if cfg, err := g.loadConfig(); err == nil {
		hs.self = cfg.HubName()
	}
	hs.live, _ = reg.LiveHubs(cmd.Context())
	rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpStatus})
	if err != nil {
		return hs // this folder's hub did not answer
	}
	hs.online, hs.held, hs.degraded = rep.Online, rep.Held, rep.Degraded
	if hs.online == nil {
		hs.online = map[string]bool{} // the hub answered: no device is online (omitted when empty)
	}
	if hs.degraded != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the hub is degraded: %s\n", hs.degraded)
	}
	return hs
}

func (hs hubState) view(d *registry.Device) deviceView {
	return deviceView{Device: d, Online: hs.online[d.Name] || hs.elsewhere(d), HeldRevocation: hs.held[d.Name]}
}

// elsewhere reports whether the device's session is on another live hub of the registry.
func (hs hubState) elsewhere(d *registry.Device) bool {
	_, live := hs.live[d.Hub]
	return d.Hub != "" && d.Hub != hs.self && live
}

func (hs hubState) status(d *registry.Device) string {
	if _, ok := hs.held[d.Name]; ok && !d.Revoked() {
		return "revoked (held in the hub's memory: the registry cannot write)"
	}
	online := hs.online
	switch {
	case d.Revoked() && registry.IsPending(d.RevokeWhy):
		return "pending approval (iotsafe device approve " + d.Name + ")"
	case d.Revoked():
		return "revoked " + d.RevokedAt.Local().Format(time.DateTime)
	case hs.elsewhere(d):
		return "online at hub " + d.Hub
	case online == nil:
		return "unknown (hub not running)"
	case online[d.Name]:
		return "online"
	case d.LastSeen != nil:
		return "offline since " + d.LastSeen.Local().Format(time.DateTime)
	default:
		return "never connected"
	}
}

func deviceShowCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a device: keys, protected sockets, negotiated algorithms, status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRegistry(cmd, func(reg *registry.Registry) error {
				d, err := reg.Device(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				hs := g.hubState(cmd, reg)
				v := hs.view(d)
				v.HostKeys = g.hostKeysOf(cmd, reg, d)
				if outFmt.structured() {
					return outFmt.print(cmd.OutOrStdout(), v)
				}
				printDevice(cmd.OutOrStdout(), v, hs)
				return nil
			})
		},
	}
	outFmt = addOutput(c)
	return c
}

func printDevice(w io.Writer, v deviceView, hs hubState) {
	d := v.Device
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "device\t%s\n", d.Name)
	fmt.Fprintf(tw, "profile\t%s\n", d.Profile)
	if d.Via != "" {
		fmt.Fprintf(tw, "gateway\t%s\t(the device connects to that gateway, which relays it here)\n", d.Via)
	}
	fmt.Fprintf(tw, "address\t%s\t(source of its direct forwards)\n", d.Address)
	fmt.Fprintf(tw, "status\t%s\n", hs.status(d))
	if d.Revoked() && d.RevokeWhy != "" {
		fmt.Fprintf(tw, "revoked because\t%s\n", d.RevokeWhy)
	} else if why, ok := hs.held[d.Name]; ok {
		fmt.Fprintf(tw, "revoked because\t%s\n", why)
	}
	fmt.Fprintf(tw, "violations\t%d\n", d.Violations)
	if len(d.Groups) > 0 {
		fmt.Fprintf(tw, "groups\t%s\n", strings.Join(d.Groups, ", "))
	}
	for _, k := range d.Keys {
		st := "active"
		if k.RevokedAt != nil {
			st = "revoked"
		}
		if a := d.LastAlgos; a != nil && a.Key == k.Fingerprint {
			st += ", used by the last session" // rotation: has the device moved to its new key?
		}
		fmt.Fprintf(tw, "key\t%s %s (%s, added %s)\n", k.Type, k.Fingerprint, st, k.CreatedAt.Local().Format(time.DateTime))
	}
	for _, s := range d.Sockets {
		fmt.Fprintf(tw, "socket\t%s\t%s\n", s.Alias, s.Addr)
	}
	if a := d.LastAlgos; a != nil && d.Via != "" {
		// What the gateway reported of the device's own session there.
		fmt.Fprintf(tw, "last session\tfrom %s, client %s, cipher %s, key %s\n", printable(d.LastRemote), printable(a.Client), printable(a.Cipher), printable(a.Key))
	} else if a != nil {
		fmt.Fprintf(tw, "last session\tfrom %s, client %s\n", printable(d.LastRemote), printable(a.Client))
		fmt.Fprintf(tw, "negotiated\tkex %s, cipher %s, host key %s, device key %s", a.KeyExchange, a.Cipher, a.HostKey, a.KeyType)
		if a.MAC != "" {
			fmt.Fprintf(tw, ", mac %s", a.MAC)
		}
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "forwarding\t%s\n", forwardingMode(a.Multiplexed))
	}
	for _, k := range v.HostKeys {
		when := ""
		if k.At != nil {
			when = " " + k.At.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "hub host key\t%s %s: %s%s\n", k.State, k.Fingerprint, k.Device, when)
	}
	tw.Flush()
}

// forwardingMode says how a session carries its forwarded connections.
func forwardingMode(mux string) string {
	mux, v2 := sshext.MuxMode(mux)
	if v2 {
		return forwardingMode(mux) + " (framing version 2)"
	}
	switch mux {
	case "":
		return "one SSH channel per connection"
	case sshext.MuxDeflate:
		return "one multiplexed channel, compressed (deflate)"
	case sshext.MuxPlain:
		return "one multiplexed channel, uncompressed"
	}
	return "one multiplexed channel, mode " + mux
}

func deviceRevokeCmd(g *globals) *cobra.Command {
	var reason string
	var outFmt *output
	c := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Refuse the device's keys from now on and close its live session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.change(cmd, control.RevokeDevice{Device: args[0], Reason: reason})
			if err != nil {
				return err
			}
			return reportClosed(cmd, a, args[0], "", "revoked", "revoked "+args[0], outFmt)
		},
	}
	c.Flags().StringVar(&reason, "reason", "revoked by operator", "why (kept in the registry and the audit log)")
	outFmt = addOutput(c)
	return c
}

func deviceReinstateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "reinstate NAME",
		Short: "Undo a revoke: the device's keys revoked with it work again (audited)",
		Long: `Undo a revoke made by mistake, or by the device's profile after violations: the keys
revoked with the device log in again (a key revoked on its own before stays revoked), its
violation count starts again at 0, and its address, sockets, grants and notifications are
as they were. The audit log records it ('iotsafe events --device NAME').

A device that was stolen or whose key leaked is not reinstated: remove it and enroll it
again with a new key.`,
		Example: "  iotsafe device reinstate dev42",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.change(cmd, control.ReinstateDevice{Device: args[0]})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reinstated %s: its keys revoked with it log in again\n", args[0])
			if !a.HubRunning {
				fmt.Fprintln(cmd.OutOrStdout(), noHubNote)
			}
			return nil
		},
	}
}

func deviceRemoveCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "remove NAME",
		Short: "Delete a device, its keys, sockets and notifications, closing its live session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.change(cmd, control.RemoveDevice{Device: args[0]})
			if err != nil {
				return err
			}
			return reportClosed(cmd, a, args[0], "", "removed", "removed "+args[0], outFmt)
		},
	}
	outFmt = addOutput(c)
	return c
}

func deviceSetGroupsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "set-groups NAME [GROUP...]",
		Short:   "Replace the device groups of a device (none: leave every group); grants to @GROUP follow at once",
		Example: "  iotsafe device set-groups dev42 sensors floor-2",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.change(cmd, control.SetGroups{Device: args[0], Groups: args[1:]}); err != nil {
				return err
			}
			if len(args) == 1 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is in no device group\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is in %s\n", args[0], strings.Join(args[1:], ", "))
			}
			return nil
		},
	}
}
