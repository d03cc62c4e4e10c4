// Package diskspace tells how much room a filesystem has left: the hub stops the writes
// that can wait (enrolments, notifications) before its data folder's disk is full, so
// the ones that cannot (revocations, the audit log) still find room.
package diskspace

import "golang.org/x/sys/unix"

// FreeMiB is the space left to unprivileged writers on the filesystem holding dir, in
// MiB; -1 when it cannot be read.
func FreeMiB(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize) >> 20
}
