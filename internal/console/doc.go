// Package console is the operator console: the fleet in a browser, served by the hub
// on the front door's own host at /console/, over the registry and the change path
// the CLI uses (no state of its own).
//
// Who may do what is the CLI's rights model: the grants +view, +operate and +admin
// (registry.RightView...) on the devices they cover. Pages are rendered on the server
// (html/template escapes every device-supplied string); the one script, embedded, only
// swaps in the server's fresh rendering when the registry's change feed says something
// changed (server-sent events), so there is no inline script and the
// Content-Security-Policy forbids any. Every change is a POST carrying a CSRF token bound
// to the login session, from the console's own origin; destructive ones also take the
// account's password again. The session cookie is __Host- prefixed: a device's
// subdomain can neither read nor set it.
package console
