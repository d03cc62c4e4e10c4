// Package sdnotify tells a service manager what a long-running iotsafe process is doing,
// with systemd's notification protocol (sd_notify(3)): ready once it serves, reloading,
// stopping, a one-line status, and watchdog keep-alives. The protocol is one datagram of
// KEY=VALUE lines to the socket named in $NOTIFY_SOCKET; outside a service manager the
// variable is unset and every call does nothing, so the hub and the agent call it
// unconditionally. The caller reads the variables (New) and removes them from its
// environment, so a child process never speaks for it.
package sdnotify
