package firewall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/lockfile"
)

// ClaimDir holds the lock files that say which process owns which table in which network
// namespace. It is on tmpfs: a claim ends with its process, even at a crash.
var ClaimDir = "/run/iotsafe"

// ErrTableOwned means another live process manages the table in this network namespace.
var ErrTableOwned = errors.New("firewall: the nftables table belongs to another running hub")

// Claim is the exclusive right to manage one table in one network namespace. Two hubs on
// one host would otherwise replace each other's rules, and the first to stop would delete
// the other's table. Release it after removing the table.
type Claim = lockfile.Lock

// ClaimTable takes the claim on table in the caller's network namespace (netnsFD < 0) or
// the one open at netnsFD, without waiting.
func ClaimTable(table string, netnsFD int) (*Claim, error) {
	var st unix.Stat_t
	var err error
	if netnsFD >= 0 {
		err = unix.Fstat(netnsFD, &st)
	} else {
		err = unix.Stat("/proc/self/ns/net", &st)
	}
	if err != nil {
		return nil, fmt.Errorf("firewall: network namespace: %w", err)
	}
	if err := os.MkdirAll(ClaimDir, 0o700); err != nil {
		return nil, fmt.Errorf("firewall: %w", err)
	}
	c, err := lockfile.TryLock(filepath.Join(ClaimDir, fmt.Sprintf("nft-%d-%s.lock", st.Ino, table)), true)
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("%w: table inet %s is managed by process %s; give this hub its own access.table", ErrTableOwned, table, held.Holder)
	}
	if err != nil {
		return nil, fmt.Errorf("firewall: %w", err)
	}
	return c, nil
}
