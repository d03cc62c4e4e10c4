// Package logging builds the structured logger every iotsafe process uses (hub, agent,
// demo) from the "log:" section of its configuration: level and text or JSON lines on a
// writer, with a level that can change while it runs (a hub's SIGHUP), and each line's
// syslog priority first when the writer is systemd's journal.
package logging
