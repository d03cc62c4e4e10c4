package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// hubStatus is what `iotsafe status` reports (and prints with --json).
type hubStatus struct {
	Running bool           `json:"running"`
	Hub     *admin.HubInfo `json:"hub,omitempty"`
	// Degraded describes what the hub holds in memory because the registry cannot
	// write ("" when it writes); Held are its held revocations (device -> reason).
	Degraded string            `json:"degraded,omitempty"`
	Held     map[string]string `json:"held,omitempty"`
	Devices  *deviceCounts     `json:"devices,omitempty"`
	// Schema is the registry's schema version; Registry where it is (the file, or the
	// PostgreSQL DSN without its password) and, on PostgreSQL, the hubs serving from it.
	Schema   int                         `json:"schema_version,omitempty"`
	Registry string                      `json:"registry,omitempty"`
	Hubs     map[string]registry.HubInfo `json:"hubs,omitempty"`
	// RegistryError says why the device counts are missing.
	RegistryError string `json:"registry_error,omitempty"`
	// LastBackup is the newest backup of this hub's data folder, if any.
	LastBackup *registry.Event `json:"last_backup,omitempty"`
	// HostKeys are the host key files of the data folder: signing, next and retired.
	HostKeys []hostkey.Entry `json:"host_keys,omitempty"`
}

type deviceCounts struct {
	Enrolled int `json:"enrolled"`
	Online   int `json:"online"`
	Revoked  int `json:"revoked"`
}

func statusCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "status",
		Short: "Is the hub running and healthy: listeners, devices online, registry, free space",
		Long: `Status asks the hub running on the data folder (over its admin socket) and reads the
registry. It exits 0 when the hub runs and is healthy, and 1 when no hub runs, the
registry cannot write (the hub holds revocations and audit events in memory), or the data
folder is below audit.min_free_mib: a monitoring check can run it as is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := g.status(cmd)
			if outFmt.structured() {
				if err := outFmt.print(cmd.OutOrStdout(), st); err != nil {
					return err
				}
			} else {
				printStatus(cmd.OutOrStdout(), g.data, st)
			}
			if problems := st.problems(); len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			return nil
		},
	}
	outFmt = addOutput(c)
	return c
}

// status asks the hub and reads the registry; neither failing is an error here.
func (g *globals) status(cmd *cobra.Command) hubStatus {
	var st hubStatus
	rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpInfo})
	if err == nil {
		st.Running, st.Hub, st.Degraded, st.Held = true, rep.Hub, rep.Degraded, rep.Held
	}
	st.HostKeys, _ = hostkey.List(g.data) // unreadable (another user's folder): no row
	// Status only reads: a data folder without a registry is not given one (a registry
	// in PostgreSQL is not in the folder).
	cfg, err := g.loadConfig()
	if err != nil {
		st.RegistryError = err.Error()
		return st
	}
	if cfg.Registry.DSN == "" {
		if _, err := os.Stat(filepath.Join(g.data, registry.FileName)); err != nil {
			st.RegistryError = fmt.Sprintf("no registry in %s (is --data right?)", g.data)
			return st
		}
	}
	reg, _, err := g.openRegistry(cmd.Context())
	if err != nil {
		st.RegistryError = err.Error()
		return st
	}
	defer reg.Close()
	if st.Schema, err = reg.Version(cmd.Context()); err != nil {
		st.RegistryError = err.Error()
		return st
	}
	st.Registry = reg.Where()
	if st.Hubs, err = reg.LiveHubs(cmd.Context()); err != nil {
		st.RegistryError = err.Error()
		return st
	}
	states, err := reg.DeviceStates(cmd.Context())
	if err != nil {
		st.RegistryError = err.Error()
		return st
	}
	n := deviceCounts{Enrolled: len(states)}
	if st.Hub != nil {
		n.Online = st.Hub.Online
	}
	for _, d := range states {
		if _, held := st.Held[d.Name]; d.Revoked || held {
			n.Revoked++
		}
	}
	st.Devices = &n
	st.LastBackup, _ = reg.LastBackup(cmd.Context(), cfg.HubName())
	return st
}

// problems are what makes the status unhealthy.
func (st hubStatus) problems() []string {
	var out []string
	if !st.Running {
		out = append(out, "the hub is not running")
	}
	if st.Degraded != "" {
		out = append(out, "the hub is degraded: the registry cannot write")
	}
	if h := st.Hub; h != nil && h.DataFreeMiB >= 0 && h.DataFreeMiB < int64(h.MinFreeMiB) {
		out = append(out, "the data folder is nearly full")
	}
	return out
}

func printStatus(w io.Writer, data string, st hubStatus) {
	row := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-10s %s\n", name, fmt.Sprintf(format, args...))
	}
	statusOfHub(row, data, st)
	statusOfFleet(row, st)
	if h := st.Hub; h != nil && h.Upstream != nil {
		statusOfUpstream(row, h.Upstream)
	}
}

// statusRow prints one row of iotsafe status.
type statusRow func(name, format string, args ...any)

// statusOfHub is the hub, its registry, its data folder and its listeners.
func statusOfHub(row statusRow, data string, st hubStatus) {
	if !st.Running {
		row("hub", "not running (no answer on %s/%s)", data, admin.SocketName)
	} else if h := st.Hub; h != nil {
		row("hub", "running, pid %d, version %s, up %s (since %s)", h.PID, h.Version,
			time.Since(h.Started).Round(time.Second), h.Started.Local().Format(time.DateTime))
	}
	switch {
	case st.Degraded != "":
		row("registry", "DEGRADED: %s; %d revocation(s) held in memory", st.Degraded, len(st.Held))
	case st.RegistryError != "":
		row("registry", "cannot be read: %s", st.RegistryError)
	default:
		row("registry", "ok, schema version %d, %s", st.Schema, st.Registry)
	}
	if len(st.Hubs) > 0 {
		names := make([]string, 0, len(st.Hubs))
		for name := range st.Hubs {
			names = append(names, name)
		}
		sort.Strings(names)
		row("hubs", "%d serving from the registry: %s", len(names), strings.Join(names, ", "))
	}
	if h := st.Hub; h != nil {
		switch {
		case h.DataFreeMiB < 0:
			row("data", "%s: free space unknown", data)
		case h.DataFreeMiB < int64(h.MinFreeMiB):
			row("data", "%s: LOW, %d MiB free, below audit.min_free_mib (%d): enrolments are refused", data, h.DataFreeMiB, h.MinFreeMiB)
		default:
			row("data", "%s: %d MiB free (enrolments stop below %d MiB)", data, h.DataFreeMiB, h.MinFreeMiB)
		}
		roles := make([]string, 0, len(h.Listeners))
		for role := range h.Listeners {
			roles = append(roles, role)
		}
		sort.Strings(roles)
		var ls []string
		for _, role := range roles {
			ls = append(ls, role+" "+h.Listeners[role])
		}
		row("listeners", "%s", strings.Join(ls, ", "))
	}
}

// statusOfFleet is the devices, forwards, the last backup and the host keys.
func statusOfFleet(row statusRow, st hubStatus) {
	if d := st.Devices; d != nil {
		if st.Running {
			sessions := ""
			if h := st.Hub; h != nil && h.Sessions != d.Online {
				sessions = fmt.Sprintf(" (%d sessions)", h.Sessions)
			}
			row("devices", "%d enrolled, %d online%s, %d revoked", d.Enrolled, d.Online, sessions, d.Revoked)
		} else {
			row("devices", "%d enrolled, %d revoked", d.Enrolled, d.Revoked)
		}
	}
	if h := st.Hub; h != nil {
		row("forwards", "%d open; the memory budget allows %d (ssh.forward_memory_mib)", h.Forwards, h.ForwardLimit)
	}
	switch b := st.LastBackup; {
	case b != nil:
		row("backup", "last %s (%s ago) %s", b.At.Local().Format(time.DateTime), time.Since(b.At).Round(time.Minute), b.Detail)
	case st.Devices != nil:
		row("backup", "none recorded ('iotsafe backup DIR' copies the data folder with the hub running)")
	}
	for _, k := range st.HostKeys {
		switch k.State {
		case "signing":
			row("host key", "%s %s", k.Kind, k.Fingerprint)
		case "next":
			row("host key", "%s %s next, announced since %s: promote once devices learned it ('iotsafe hostkey list --pending')", k.Kind, k.Fingerprint, k.Since.Local().Format(time.DateTime))
		case "retired":
			row("host key", "%s %s retired %s: devices are told it is gone ('iotsafe hostkey list')", k.Kind, k.Fingerprint, k.Since.Local().Format(time.DateTime))
		}
	}
}

// statusOfUpstream is a gateway's session to its centre and its relay.
func statusOfUpstream(row statusRow, u *admin.UpstreamInfo) {
	last := ""
	if u.LastError != "" && u.State != "connected" {
		last = "; last error: " + u.LastError
	}
	row("upstream", "%s to %s as gateway %q: %d devices announced, %d refused, %d reconnections%s",
		u.State, u.Hub, u.Name, u.Announced, u.Refused, u.Reconnects, last)
	if r := u.Relay; r != nil {
		last = ""
		if r.LastError != "" && r.State != "relaying" {
			last = "; last error: " + r.LastError
		}
		lost := ""
		if r.Lost > 0 {
			lost = fmt.Sprintf("; %d deleted by retention before the centre got them", r.Lost)
		}
		row("relay", "%s: %d notifications stored at the centre since this start (its mark: id %d here, %d ids behind), %d duplicates recognised, %d refused%s%s",
			r.State, r.Relayed, r.Mark, r.Behind, r.Duplicates, r.Refused, lost, last)
	}
}
