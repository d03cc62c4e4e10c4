// Package lockfile gives a process exclusive ownership of something on this host (a data
// folder, an nftables table) through a lock file: flock, so the claim ends with the
// process even at a crash, with the holder's pid in the file for the message a second
// claimer gets.
package lockfile
