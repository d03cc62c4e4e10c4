package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/pki"
)

// doctorCheck is one thing 'iotsafe doctor' looked at.
type doctorCheck struct {
	Check  string `json:"check"`
	Status string `json:"status"` // ok, warn, fail, skip
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
	checkSkip = "skip"
)

func doctorCmd(g *globals) *cobra.Command {
	var outFmt *output
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check what the hub and the commands depend on, and say what to fix",
		Long: `Check, in order: the data folder found, the hub answering on its admin socket, the
registry, every listener accepting connections, the SSH banner, the names clients use
(the front door's domain and a device's name under it) resolving on this machine, the
certificates those names get (trusted by the hub's CA, covering the name, not about to
expire), the hub's open-file limit, the access layers protecting the device sockets
(nftables and the user-space check), the free space of the data folder, and the last
backup. Each line says ok, warn or fail and, for the last two, what to do. Exit status 1
if anything failed; warnings alone exit 0.`,
		Example: "  iotsafe doctor\n  iotsafe doctor -o json | jq '.[] | select(.status != \"ok\")'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			checks := g.doctor(cmd)
			if outFmt.structured() {
				if err := outFmt.print(cmd.OutOrStdout(), checks); err != nil {
					return err
				}
			} else {
				printDoctor(cmd.OutOrStdout(), checks)
			}
			var failed []string
			for _, c := range checks {
				if c.Status == checkFail {
					failed = append(failed, c.Check)
				}
			}
			if len(failed) > 0 {
				cmd.SilenceUsage = true
				return fmt.Errorf("doctor: %d check(s) failed: %s", len(failed), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	c.Annotations = map[string]string{worksWithoutHub: ""} // it reports a missing hub itself
	outFmt = addOutput(c)
	return c
}

func printDoctor(w io.Writer, checks []doctorCheck) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(c.Status), c.Check, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
}

// doctor runs every check; those that need the running hub are skipped without it.
func (g *globals) doctor(cmd *cobra.Command) []doctorCheck {
	if g.findErr != nil {
		return []doctorCheck{{Check: "data", Status: checkFail, Detail: g.findErr.Error(),
			Fix: "start the hub ('iotsafe hub --data DIR', or 'systemctl start iotsafe-hub'), or name its folder with --data"}}
	}
	where, _ := filepath.Abs(g.data)
	out := []doctorCheck{{Check: "data", Status: checkOK, Detail: fmt.Sprintf("%s (found by %s)", where, g.found.How)}}
	st := g.status(cmd)
	out = append(out, doctorRegistry(st))
	if !st.Running || st.Hub == nil {
		return append(out, doctorCheck{Check: "hub", Status: checkFail, Detail: "no answer on " + filepath.Join(where, admin.SocketName),
			Fix: "start it ('iotsafe hub --data " + g.data + "', or 'systemctl start iotsafe-hub'); its log says why it stopped ('journalctl -u iotsafe-hub')"})
	}
	h := st.Hub
	out = append(out, doctorCheck{Check: "hub", Status: checkOK, Detail: fmt.Sprintf("running, pid %d, version %s, %d device(s) online", h.PID, h.Version, h.Online)})
	ctx := cmd.Context()
	out = append(out, doctorListeners(ctx, h)...)
	roots := g.hubRoots()
	for _, e := range h.Endpoints {
		if e.ServerName == "" || (e.Proto != "https" && e.Proto != "mqtts") {
			continue
		}
		names := []string{e.ServerName}
		if e.Role == "frontdoor" {
			names = append(names, "dev1."+e.ServerName) // devices are reached under the domain
		}
		for _, n := range names {
			out = append(out, doctorName(ctx, n, e.Addr), doctorCertificate(ctx, e, n, roots))
		}
	}
	out = append(out, doctorDescriptors(h.PID), doctorAccess(h.Access), doctorDisk(h))
	return append(out, doctorBackup(st))
}

func doctorRegistry(st hubStatus) doctorCheck {
	switch {
	case st.Degraded != "":
		return doctorCheck{Check: "registry", Status: checkFail, Detail: "DEGRADED: " + st.Degraded,
			Fix: "the hub holds revocations in memory until the registry can write again: free its disk, or bring PostgreSQL back"}
	case st.RegistryError != "":
		return doctorCheck{Check: "registry", Status: checkFail, Detail: st.RegistryError, Fix: "see 'iotsafe registry info'"}
	}
	return doctorCheck{Check: "registry", Status: checkOK, Detail: fmt.Sprintf("schema version %d, %s", st.Schema, st.Registry)}
}

// doctorListeners dials every listener the hub reports; the SSH one must greet.
func doctorListeners(ctx context.Context, h *admin.HubInfo) []doctorCheck {
	var out []doctorCheck
	for _, e := range h.Endpoints {
		name := "listener " + e.Role
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err := d.DialContext(ctx, "tcp", reachable(e.Addr))
		if err != nil {
			out = append(out, doctorCheck{Check: name, Status: checkFail, Detail: fmt.Sprintf("%s (%s): %v", e.Addr, e.Proto, err),
				Fix: "a firewall or a full accept queue? the hub's log says if it stopped listening"})
			continue
		}
		detail := fmt.Sprintf("%s (%s) accepts connections", e.Addr, e.Proto)
		if e.Proto == "ssh" {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			banner, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
				c.Close()
				out = append(out, doctorCheck{Check: name, Status: checkFail, Detail: fmt.Sprintf("%s accepts but sends no SSH banner: %v", e.Addr, err),
					Fix: "the hub may be out of descriptors or overloaded: see its log and 'iotsafe status'"})
				continue
			}
			detail = fmt.Sprintf("%s greets: %s", e.Addr, printable(strings.TrimSpace(banner)))
		}
		c.Close()
		out = append(out, doctorCheck{Check: name, Status: checkOK, Detail: detail})
	}
	return out
}

// doctorName checks that a name clients use resolves here (the demo's hints and curl
// need it, or --resolve).
func doctorName(ctx context.Context, name, addr string) doctorCheck {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil || len(ips) == 0 {
		_, port, _ := net.SplitHostPort(reachable(addr))
		host, _, _ := net.SplitHostPort(reachable(addr))
		return doctorCheck{Check: "name " + name, Status: checkWarn, Detail: "does not resolve on this machine",
			Fix: fmt.Sprintf("publish a DNS record (a wildcard *.DOMAIN for the front door) pointing at the hub, or tell each client: curl --resolve %s:%s:%s, 'iotsafe soap send --resolve ...'", name, port, host)}
	}
	return doctorCheck{Check: "name " + name, Status: checkOK, Detail: "resolves to " + strings.Join(ips, ", ")}
}

// doctorCertificate connects as a client would, by name, and checks the chain and the
// name against the hub's CA (or the system's roots for a certificate of the operator's).
func doctorCertificate(ctx context.Context, e admin.Endpoint, name string, roots *x509.CertPool) doctorCheck {
	check := "certificate " + name
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{ServerName: name, RootCAs: roots, MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(ctx, "tcp", reachable(e.Addr))
	if err != nil {
		return doctorCheck{Check: check, Status: checkFail, Detail: fmt.Sprintf("%s (%s): %v", e.Addr, e.Role, err),
			Fix: "clients by this name will refuse it: give the front door a certificate for the domain and *.domain (frontdoor.cert_file), or have clients trust the hub's CA ('iotsafe frontdoor ca')"}
	}
	defer c.Close()
	leaf := c.(*tls.Conn).ConnectionState().PeerCertificates[0]
	left := time.Until(leaf.NotAfter)
	detail := fmt.Sprintf("trusted, valid until %s (%d days)", leaf.NotAfter.Local().Format(time.DateOnly), int(left.Hours()/24))
	if left < 14*24*time.Hour {
		return doctorCheck{Check: check, Status: checkWarn, Detail: detail, Fix: "renew it (a certificate file is reread when it changes; the hub's own CA renews by itself)"}
	}
	return doctorCheck{Check: check, Status: checkOK, Detail: detail}
}

// hubRoots is the hub's local CA as a pool, or nil (the system's roots) without one.
func (g *globals) hubRoots() *x509.CertPool {
	b, err := os.ReadFile(filepath.Join(g.data, pki.CADir, pki.CACertFile))
	if err != nil {
		return nil
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil
	}
	return p
}

// doctorDescriptors reads the hub's open-file limit (every session and forward holds
// descriptors) and, where readable, how many it has open.
func doctorDescriptors(pid int) doctorCheck {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return doctorCheck{Check: "descriptors", Status: checkSkip, Detail: "cannot read the hub's limits: " + err.Error()}
	}
	soft := -1
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "Max open files")); strings.HasPrefix(line, "Max open files") && len(f) >= 1 {
			soft, _ = strconv.Atoi(f[0])
			if f[0] == "unlimited" {
				soft = 1 << 30
			}
		}
	}
	detail := fmt.Sprintf("limit %d open files", soft)
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		detail = fmt.Sprintf("%d open of %d", len(fds), soft)
		if soft > 0 && len(fds)*10 > soft*8 {
			return doctorCheck{Check: "descriptors", Status: checkWarn, Detail: detail + ": over 80% used", Fix: "raise LimitNOFILE in the unit (or ulimit -n) and restart the hub"}
		}
	}
	if soft >= 0 && soft < 65536 {
		return doctorCheck{Check: "descriptors", Status: checkWarn, Detail: detail + ": a fleet of thousands needs more",
			Fix: "run the hub with LimitNOFILE=1048576 (the systemd unit has it) or 'ulimit -n 1048576' before it starts"}
	}
	return doctorCheck{Check: "descriptors", Status: checkOK, Detail: detail}
}

func doctorAccess(a *admin.AccessInfo) doctorCheck {
	switch {
	case a == nil:
		return doctorCheck{Check: "access", Status: checkSkip, Detail: "the hub does not report its access layers (older version)"}
	case !a.UserSpace && !a.Kernel:
		return doctorCheck{Check: "access", Status: checkFail, Detail: "no layer protects the device sockets: any local user reaches every device",
			Fix: "access.userspace: true (the default) in hub.yaml, and run the hub as root for the kernel layer"}
	case !a.Kernel:
		return doctorCheck{Check: "access", Status: checkWarn, Detail: "user-space check only; the kernel layer is off: " + a.KernelOff,
			Fix: "run the hub as root (or with CAP_NET_ADMIN) with nftables available; 'access.kernel: on' then refuses to start without it"}
	case !a.UserSpace:
		return doctorCheck{Check: "access", Status: checkWarn, Detail: "kernel layer (nftables) only: access.userspace is off", Fix: "access.userspace: true in hub.yaml"}
	}
	return doctorCheck{Check: "access", Status: checkOK, Detail: "kernel (nftables) and user-space layers"}
}

func doctorDisk(h *admin.HubInfo) doctorCheck {
	switch {
	case h.DataFreeMiB < 0:
		return doctorCheck{Check: "disk", Status: checkSkip, Detail: "free space unknown"}
	case h.DataFreeMiB < int64(h.MinFreeMiB):
		return doctorCheck{Check: "disk", Status: checkFail, Detail: fmt.Sprintf("%d MiB free, below audit.min_free_mib (%d): enrolments are refused", h.DataFreeMiB, h.MinFreeMiB),
			Fix: "free space on the data folder's filesystem, or lower audit.retention / audit.max_events"}
	case h.DataFreeMiB < 4*int64(h.MinFreeMiB):
		return doctorCheck{Check: "disk", Status: checkWarn, Detail: fmt.Sprintf("%d MiB free, near audit.min_free_mib (%d)", h.DataFreeMiB, h.MinFreeMiB),
			Fix: "free space before enrolments stop"}
	}
	return doctorCheck{Check: "disk", Status: checkOK, Detail: fmt.Sprintf("%d MiB free", h.DataFreeMiB)}
}

func doctorBackup(st hubStatus) doctorCheck {
	switch b := st.LastBackup; {
	case b == nil:
		return doctorCheck{Check: "backup", Status: checkWarn, Detail: "no backup of this hub recorded", Fix: "iotsafe backup DIR (with the hub running); docs/operations.md"}
	case time.Since(b.At) > 8*24*time.Hour:
		return doctorCheck{Check: "backup", Status: checkWarn, Detail: fmt.Sprintf("the last is %d days old", int(time.Since(b.At).Hours()/24)), Fix: "iotsafe backup DIR"}
	default:
		return doctorCheck{Check: "backup", Status: checkOK, Detail: "last " + b.At.Local().Format(time.DateTime)}
	}
}
