package hub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockName is the lock file in the data folder: whoever holds it owns the folder.
const LockName = "hub.lock"

// ErrDataInUse means another hub (or an offline command) holds the data folder.
var ErrDataInUse = errors.New("hub: the data folder is in use")

// DataLock is the exclusive hold of a data folder. A hub takes it before it touches
// anything in the folder (a second hub must not remove the first one's sockets), and
// commands that rewrite allocations take it to make sure no hub is serving them.
type DataLock struct{ f *os.File }

// LockData takes the data folder's lock without waiting, creating the folder (0700) and
// the lock file (0600) if needed. The lock ends with the process or Release.
func LockData(dir string) (*DataLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hub: data folder: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hub: data folder lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b[:n]))
			if holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is held by process %s (a running hub?); stop it first, or give this one its own --data", ErrDataInUse, dir, holder)
		}
		return nil, fmt.Errorf("hub: data folder lock: %w", err)
	}
	// The holder's pid, for the message above; the lock itself is the flock.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DataLock{f: f}, nil
}

// Release gives the folder up.
func (l *DataLock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
