package firewall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ClaimDir holds the lock files that say which process owns which table in which network
// namespace. It is on tmpfs: a claim ends with its process, even at a crash.
var ClaimDir = "/run/iotsafe"

// ErrTableOwned means another live process manages the table in this network namespace.
var ErrTableOwned = errors.New("firewall: the nftables table belongs to another running hub")

// Claim is the exclusive right to manage one table in one network namespace. Two hubs on
// one host would otherwise replace each other's rules, and the first to stop would delete
// the other's table.
type Claim struct {
	f    *os.File
	path string
}

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
	path := filepath.Join(ClaimDir, fmt.Sprintf("nft-%d-%s.lock", st.Ino, table))
	for {
		c, retry, err := tryClaim(path, table)
		if !retry {
			return c, err
		}
	}
}

// tryClaim locks the file at path; retry means the file was removed by a releasing owner
// between our open and our lock, so the lock we got guards nothing.
func tryClaim(path, table string) (c *Claim, retry bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("firewall: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("%w: table inet %s is managed by process %s; give this hub its own access.table", ErrTableOwned, table, strings.TrimSpace(string(b[:n])))
		}
		return nil, false, fmt.Errorf("firewall: claim %s: %w", path, err)
	}
	var held, now unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &now) != nil || held.Ino != now.Ino {
		f.Close()
		return nil, true, nil
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Claim{f: f, path: path}, false, nil
}

// Release gives the table up (and removes the lock file, while still holding it); call
// it after removing the table.
func (c *Claim) Release() {
	if c != nil && c.f != nil {
		os.Remove(c.path)
		c.f.Close()
		c.f = nil
	}
}
