package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// importLine is one device of an import list.
type importLine struct {
	Name string
	Key  ssh.PublicKey
}

// maxImportLine bounds one line of an import list (an RSA-16384 key is about 2.8 KB).
const maxImportLine = 16 << 10

// parseImportLine reads "NAME KEYTYPE BASE64 [COMMENT]": a device name, then its public
// key as in authorized_keys. Blank lines and lines starting with '#' give ok false.
func parseImportLine(line string) (d importLine, ok bool, err error) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return importLine{}, false, nil
	}
	i := strings.IndexAny(line, " \t")
	if i < 0 || strings.TrimSpace(line[i:]) == "" {
		return importLine{}, false, errors.New("want NAME and an OpenSSH public key (NAME ssh-ed25519 AAAA...)")
	}
	name, rest := line[:i], strings.TrimSpace(line[i:])
	if err := checkDeviceName(name); err != nil {
		return importLine{}, false, err
	}
	key, _, options, _, err := ssh.ParseAuthorizedKey([]byte(rest))
	if err != nil {
		return importLine{}, false, fmt.Errorf("device %s: not an OpenSSH public key: %v", name, err)
	}
	if len(options) > 0 {
		return importLine{}, false, fmt.Errorf("device %s: authorized_keys options are not a device's key", name)
	}
	return importLine{Name: name, Key: key}, true, nil
}

// readImportList reads a whole list first, so a malformed line enrolls nothing.
func readImportList(r io.Reader) ([]importLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxImportLine)
	var out []importLine
	seen := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		d, ok, err := parseImportLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if !ok {
			continue
		}
		if first, dup := seen[d.Name]; dup {
			return nil, fmt.Errorf("line %d: device %s is also on line %d", n, d.Name, first)
		}
		seen[d.Name] = n
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line is longer than %d bytes", maxImportLine)
		}
		return nil, err
	}
	return out, nil
}

// imported is what the import prints of one device (--json: one object per line).
type imported struct {
	Name    string            `json:"name"`
	Profile string            `json:"profile"`
	Address string            `json:"address"`
	Key     string            `json:"key_fingerprint"`
	Sockets map[string]string `json:"sockets"`          // alias -> address:port
	Secret  string            `json:"secret,omitempty"` // with --secrets; shown once
	// Skipped says why a device was left as it was (--skip-existing): it was enrolled
	// before, with this key.
	Skipped string `json:"skipped,omitempty"`
}

// alreadyEnrolled is what --skip-existing says of a device enrolled before.
const alreadyEnrolled = "already enrolled with this key"

// maxConflicts bounds the conflicts an import lists before giving up.
const maxConflicts = 10

// splitEnrolled sorts a list into the devices still to enroll and those enrolled before
// under the same name with the same key (revoked or not: a re-run import changes
// neither). A name enrolled with another key, or a key enrolled under another name, is
// a conflict for the operator to settle: the error lists them and nothing is enrolled.
func splitEnrolled(ctx context.Context, reg *registry.Registry, list []importLine) (todo []importLine, done []*registry.Device, err error) {
	var conflicts []string
	for _, d := range list {
		owner, _, err := reg.DeviceByKey(ctx, d.Key)
		switch {
		case err == nil && owner.Name == d.Name:
			done = append(done, owner)
			continue
		case err == nil:
			conflicts = append(conflicts, fmt.Sprintf("device %s: its key is enrolled as device %s", d.Name, owner.Name))
			continue
		case !errors.Is(err, registry.ErrNotFound):
			return nil, nil, err
		}
		if _, err := reg.Device(ctx, d.Name); err == nil {
			conflicts = append(conflicts, fmt.Sprintf("device %s: enrolled with another key ('iotsafe device key add' adds one)", d.Name))
		} else if !errors.Is(err, registry.ErrNotFound) {
			return nil, nil, err
		} else {
			todo = append(todo, d)
		}
	}
	if n := len(conflicts); n > 0 {
		more := ""
		if n > maxConflicts {
			conflicts, more = conflicts[:maxConflicts], fmt.Sprintf("\n  and %d more", n-maxConflicts)
		}
		return nil, nil, fmt.Errorf("%d device(s) of the list conflict with the registry; nothing was enrolled:\n  %s%s", n, strings.Join(conflicts, "\n  "), more)
	}
	return todo, done, nil
}

func deviceImportCmd(g *globals) *cobra.Command {
	var prof string
	var groups []string
	var secrets, skipExisting bool
	var outFmt *output
	c := &cobra.Command{
		Use:   "import FILE",
		Short: "Enroll many devices from a list of names and public keys ('-' reads stdin)",
		Long: `Enroll many devices at once: FILE has one device per line, its name and then its
OpenSSH public key as in authorized_keys ("dev7 ssh-ed25519 AAAA... comment"); blank lines
and lines starting with '#' are skipped. The whole list is read first: a malformed line or
a name listed twice enrolls nothing. Devices are enrolled in list order with one profile
and the same groups; with a running hub each is a change through it, otherwise the
registry is written directly (a hub picks the devices up from its change feed). A device
that cannot be enrolled (a name or key already enrolled, a full data folder) stops the
import there; the devices before it stay enrolled, and the error names how many.

--skip-existing re-runs a list that was partly imported: a device already enrolled
under its name with its key is left as it is (not re-enrolled, no new secret, a revoked
one stays revoked) and the rest are enrolled. A name enrolled with another key, or a key
enrolled under another name, is a conflict: all are listed and nothing is enrolled.

--secrets also gives every device a telemetry secret for REST and MQTT logins, printed
once. --json prints one JSON object per device and line: name, profile, address, key
fingerprint, protected sockets, secret.`,
		Example: `  iotsafe device import fleet.txt --profile sensor --group building-a
  iotsafe device import - --secrets --json < fleet.txt > enrolled.jsonl   # keep enrolled.jsonl private
  iotsafe device import fleet.txt --profile sensor --skip-existing        # after an import stopped half-way`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.runImport(cmd, args[0], importOptions{profile: prof, groups: groups, secrets: secrets, out: outFmt, skipExisting: skipExisting})
		},
	}
	c.Flags().StringVar(&prof, "profile", profile.DefaultName, "profile NAME from the registry, or a profile FILE (YAML) to store and use")
	c.Flags().StringArrayVar(&groups, "group", nil, "device group of every device (repeatable)")
	c.Flags().BoolVar(&secrets, "secrets", false, "also give every device a telemetry secret (printed once)")
	outFmt = addOutput(c)
	c.Flags().BoolVar(&skipExisting, "skip-existing", false, "leave devices already enrolled with the same name and key as they are; enroll the rest")
	return c
}

// importOptions are device import's flags.
type importOptions struct {
	profile               string
	groups                []string
	secrets, skipExisting bool
	out                   *output
}

// runImport reads the list at path ("-": stdin), checks it against the registry
// (planImport), enrolls it device by device and reports.
func (g *globals) runImport(cmd *cobra.Command, path string, o importOptions) error {
	in := cmd.InOrStdin()
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	list, err := readImportList(in)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	list, skipped, profName, err := g.planImport(cmd.Context(), list, o)
	if err != nil {
		return err
	}
	b := g.batch(cmd)
	defer b.close()
	w := bufio.NewWriter(cmd.OutOrStdout())
	defer w.Flush()
	if o.out.structured() {
		for _, d := range skipped {
			out := importedFrom(d)
			out.Skipped = alreadyEnrolled
			o.out.printLine(w, out)
		}
	}
	for i, d := range list {
		out, err := importOne(b, d, profName, o.groups, o.secrets)
		if err != nil {
			w.Flush()
			return fmt.Errorf("device %s (%d of %d): %w; the %d before it are enrolled", d.Name, i+1, len(list), err, i)
		}
		if o.out.structured() {
			o.out.printLine(w, out)
		} else if out.Secret != "" {
			fmt.Fprintf(w, "%s %s %s\n", out.Name, out.Address, out.Secret)
		}
	}
	if !o.out.structured() {
		fmt.Fprintf(cmd.ErrOrStderr(), "enrolled %d device(s) with profile %s\n", len(list), profName)
		if len(skipped) > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "skipped %d device(s) %s\n", len(skipped), alreadyEnrolled)
		}
		if o.secrets {
			fmt.Fprintln(cmd.ErrOrStderr(), "the secrets above are not shown again: keep them now ('iotsafe device secret rotate NAME' makes a new one)")
		}
	}
	if !b.hubRunning && len(list) > 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), noHubNote)
	}
	return nil
}

// planImport resolves the profile, checks the data folder's free space and, with
// --skip-existing, splits off what is already enrolled as listed.
func (g *globals) planImport(ctx context.Context, list []importLine, o importOptions) (rest []importLine, skipped []*registry.Device, profName string, err error) {
	reg, cfg, err := g.openRegistry(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	defer reg.Close()
	if profName, err = resolveProfile(ctx, reg, o.profile); err != nil {
		return nil, nil, "", err
	}
	if err := hub.CheckFreeSpace(g.data, cfg.Audit.MinFreeMiB); err != nil {
		return nil, nil, "", err
	}
	rest = list
	if o.skipExisting {
		if rest, skipped, err = splitEnrolled(ctx, reg, list); err != nil {
			return nil, nil, "", err
		}
	}
	return rest, skipped, profName, nil
}

// importOne enrolls one device of an import (and gives it a secret).
func importOne(b *batch, d importLine, profName string, groups []string, withSecret bool) (imported, error) {
	a, err := b.apply(control.AddDevice{Name: d.Name, Profile: profName, Key: string(ssh.MarshalAuthorizedKey(d.Key)), Groups: groups})
	if err != nil {
		return imported{}, err
	}
	out := importedFrom(a.Device)
	if withSecret {
		secret, hash, err := credential.NewToken()
		if err != nil {
			return out, err
		}
		if _, err := b.apply(control.SetDeviceSecret{Device: d.Name, Hash: hash}); err != nil {
			return out, fmt.Errorf("enrolled, but its secret: %w", err)
		}
		out.Secret = secret
	}
	return out, nil
}

func importedFrom(d *registry.Device) imported {
	out := imported{Sockets: map[string]string{}}
	if d == nil {
		return out
	}
	out.Name, out.Profile, out.Address = d.Name, d.Profile, d.Address.String()
	if len(d.Keys) > 0 {
		out.Key = d.Keys[0].Fingerprint
	}
	for _, s := range d.Sockets {
		out.Sockets[s.Alias] = s.Addr.String()
	}
	return out
}
