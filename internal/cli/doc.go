// Package cli is the iotsafe command line: it parses flags and config files once and
// calls the packages that do the work. Every command finds the hub through --data.
package cli
