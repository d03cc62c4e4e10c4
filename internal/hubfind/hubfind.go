package hubfind

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
)

// Names of what makes a folder a hub's: its registry, its configuration, its admin
// socket (a hub on PostgreSQL keeps only the last two).
var hubFiles = []string{"registry.db", "hub.yaml", "admin.sock"}

// Default is the data folder of a hub started with no --data, relative to where it ran.
const Default = "./iotsafe-data"

// SystemDefault is the folder of the hub the systemd unit runs (root).
const SystemDefault = "/var/lib/iotsafe"

// EnvData names a data folder for every command of a shell.
const EnvData = "IOTSAFE_DATA"

// Holds reports whether dir looks like a hub's data folder.
func Holds(dir string) bool {
	for _, f := range hubFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

// RuntimeDir is where this user's running hubs announce themselves:
// $XDG_RUNTIME_DIR/iotsafe when set, /run/iotsafe for root, else a folder of the user's
// own in the temporary folder.
func RuntimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "iotsafe")
	}
	if os.Geteuid() == 0 {
		return "/run/iotsafe"
	}
	return filepath.Join(os.TempDir(), "iotsafe-"+strconv.Itoa(os.Geteuid()))
}

// announcement is one running hub's file in RuntimeDir.
type announcement struct {
	Data string `json:"data"` // absolute
	PID  int    `json:"pid"`
}

// Announce records that this process serves the hub in data, until the returned
// function withdraws it. Several hubs of one user each have their own file.
func Announce(data string) (withdraw func(), err error) {
	abs, err := filepath.Abs(data)
	if err != nil {
		return nil, err
	}
	dir := RuntimeDir()
	if err := ownedDir(dir, true); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	path := filepath.Join(dir, "hub-"+hex.EncodeToString(sum[:8])+".json")
	b, _ := json.Marshal(announcement{Data: abs, PID: os.Getpid()})
	// A path and a pid, no secret: operators in admin.group read root's.
	if err := atomicfile.Write(path, b, atomicfile.Options{Mode: 0o644}); err != nil {
		return nil, err
	}
	return func() {
		// Only our own: a hub that took the folder over since has rewritten the file.
		if a, err := readAnnouncement(path); err == nil && a.PID == os.Getpid() {
			os.Remove(path)
		}
	}, nil
}

// ownedDir makes sure dir exists, is the user's own (or root's) and nobody else may
// write into it: an announcement planted by another user would hand them the
// operator's commands.
func ownedDir(dir string, create bool) error {
	if create {
		mode := os.FileMode(0o700)
		if dir == systemRuntimeDir {
			mode = 0o755 // operators in admin.group read root's announcements
		}
		if err := os.MkdirAll(dir, mode); err != nil {
			return fmt.Errorf("runtime folder: %w", err)
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || (int(st.Uid) != os.Geteuid() && st.Uid != 0) || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("runtime folder %s is not a folder only this user may write: not using it", dir)
	}
	return nil
}

func readAnnouncement(path string) (announcement, error) {
	var a announcement
	b, err := os.ReadFile(path)
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil || !filepath.IsAbs(a.Data) || a.PID <= 0 {
		return a, fmt.Errorf("%s: not an announcement", path)
	}
	return a, nil
}

// systemRuntimeDir is where the hub the systemd unit runs (as root) announces itself:
// operators in admin.group find it from their own accounts too.
const systemRuntimeDir = "/run/iotsafe"

// Running lists the data folders of the hubs announced and still running (their process
// alive, their folder a hub's), sorted; stale announcements of this user are removed.
func Running() []string {
	var files []string
	for _, dir := range slices.Compact([]string{RuntimeDir(), systemRuntimeDir}) {
		if ownedDir(dir, false) == nil {
			f, _ := filepath.Glob(filepath.Join(dir, "hub-*.json"))
			files = append(files, f...)
		}
	}
	var out []string
	for _, f := range files {
		a, err := readAnnouncement(f)
		if err != nil {
			continue
		}
		if !alive(a.PID) || !Holds(a.Data) {
			os.Remove(f)
			continue
		}
		out = append(out, a.Data)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// alive reports whether process pid exists (signal 0 checks without sending).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Found is the data folder a command uses, and how it was found (for messages).
type Found struct {
	Dir string
	How string // "--data", "IOTSAFE_DATA", "./iotsafe-data", "the running hub", "/var/lib/iotsafe"
}

// ErrNone is Locate finding no hub.
var ErrNone = errors.New("no hub found")

// Locate is the data folder of the hub a command administers: flag if the operator gave
// --data, then IOTSAFE_DATA, then ./iotsafe-data if it holds a hub, then the one hub
// running (announced by this user or by root), then /var/lib/iotsafe if it holds a hub. A folder
// named by --data or IOTSAFE_DATA is used as given (the command then says if it holds
// no hub); several running hubs and no other choice are refused, listing them.
func Locate(flag string, flagSet bool) (Found, error) {
	if flagSet {
		return Found{Dir: flag, How: "--data"}, nil
	}
	if d := os.Getenv(EnvData); d != "" {
		return Found{Dir: d, How: EnvData}, nil
	}
	if Holds(Default) {
		return Found{Dir: Default, How: Default}, nil
	}
	switch run := Running(); len(run) {
	case 0:
	case 1:
		return Found{Dir: run[0], How: "the running hub"}, nil
	default:
		return Found{}, fmt.Errorf("%w: %d hubs are running (%s); name one with --data or %s", ErrNone, len(run), strings.Join(run, ", "), EnvData)
	}
	if Holds(SystemDefault) {
		return Found{Dir: SystemDefault, How: SystemDefault}, nil
	}
	return Found{}, fmt.Errorf("%w: looked for --data, %s, %s, a running hub (announced in %s) and %s; start one ('iotsafe hub'), create one ('iotsafe init --data DIR'), or name its folder with --data",
		ErrNone, EnvData, Default, RuntimeDir(), SystemDefault)
}
