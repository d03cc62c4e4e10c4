package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrHeld means another live process holds the lock.
var ErrHeld = errors.New("lockfile: held by another process")

// HeldError is ErrHeld with the holder's pid as it wrote it ("unknown" if none).
type HeldError struct{ Holder string }

func (e *HeldError) Error() string { return "held by process " + e.Holder }
func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is one held lock file.
type Lock struct {
	f      *os.File
	path   string
	remove bool
}

// TryLock takes the lock at path (created 0600) without waiting. With removeOnRelease,
// Release deletes the file (while still holding it), and TryLock makes sure the file it
// locked is still the one at path, so a concurrent release cannot leave two holders.
func TryLock(path string, removeOnRelease bool) (*Lock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lockfile: %w", err)
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
				return nil, &HeldError{Holder: holder}
			}
			return nil, fmt.Errorf("lockfile: %s: %w", path, err)
		}
		if removeOnRelease {
			var held, now unix.Stat_t
			if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &now) != nil || held.Ino != now.Ino {
				f.Close() // removed by a releasing holder meanwhile: try the new file
				continue
			}
		}
		if err := f.Truncate(0); err == nil {
			f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &Lock{f: f, path: path, remove: removeOnRelease}, nil
	}
}

// Release gives the lock up; a nil Lock is fine.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	if l.remove {
		os.Remove(l.path)
	}
	l.f.Close()
	l.f = nil
}
