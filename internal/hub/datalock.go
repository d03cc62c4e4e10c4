package hub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/diskspace"
	"github.com/iotsafe/iotsafe/internal/lockfile"
)

// LockName is the lock file in the data folder: whoever holds it owns the folder.
const LockName = "hub.lock"

// ErrDataInUse means another hub (or an offline command) holds the data folder.
var ErrDataInUse = errors.New("hub: the data folder is in use")

// DataLock is the exclusive hold of a data folder. A hub takes it before it touches
// anything in the folder (a second hub must not remove the first one's sockets), and
// commands that rewrite allocations take it to make sure no hub is serving them.
type DataLock = lockfile.Lock

// LockData takes the data folder's lock without waiting, creating the folder (0700) and
// the lock file (0600) if needed. The lock ends with the process or Release.
func LockData(dir string) (*DataLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hub: data folder: %w", err)
	}
	l, err := lockfile.TryLock(filepath.Join(dir, LockName), false)
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("%w: %s is held by process %s (a running hub?); stop it first, or give this one its own --data", ErrDataInUse, dir, held.Holder)
	}
	if err != nil {
		return nil, fmt.Errorf("hub: data folder lock: %w", err)
	}
	return l, nil
}

// ErrLowSpace means the data folder's filesystem is below audit.min_free_mib.
var ErrLowSpace = errors.New("hub: the data folder is nearly full")

// CheckFreeSpace reports ErrLowSpace when the filesystem holding dir has less than minMiB
// free: enrolments stop there, so that revocations, violations and the audit log still
// find room.
func CheckFreeSpace(dir string, minMiB int) error {
	free := FreeMiB(dir)
	if free < 0 {
		return nil // cannot tell; the write itself will say
	}
	if free < int64(minMiB) {
		return fmt.Errorf("%w: %s has %d MiB free, below audit.min_free_mib (%d); free some space first (revocations still work)", ErrLowSpace, dir, free, minMiB)
	}
	return nil
}

// FreeMiB is the space left to unprivileged writers on the filesystem holding dir, in
// MiB; -1 when it cannot be read.
func FreeMiB(dir string) int64 { return diskspace.FreeMiB(dir) }
