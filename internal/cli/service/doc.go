// Package service is what the hub's and the agent's commands share about running under a
// service manager: systemd's notifier taken from the environment, and whether output goes
// to the journal.
package service
