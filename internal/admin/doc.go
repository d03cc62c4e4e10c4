// Package admin is the hub's local control socket: a Unix socket (mode 0600, or 0660
// with an admin group) speaking one JSON request and one JSON reply per connection, so
// admin commands take effect on live sessions at once.
package admin
