// Package hubfind is how a command finds the hub it administers when the operator names
// none: a running hub announces its data folder in a runtime folder only its user can
// write (Announce), and Locate goes through one documented order — --data,
// IOTSAFE_DATA, ./iotsafe-data if it holds a hub, the one running hub announced,
// /var/lib/iotsafe (the systemd unit's folder) — and refuses, naming what it tried, when none holds a hub.
//
// It exists so that a forgotten or mistyped --data never becomes a new, empty fleet and
// so that an operator in another folder reaches the hub that is running.
package hubfind
