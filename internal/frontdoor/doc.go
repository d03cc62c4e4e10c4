// Package frontdoor is TesPX: the hub's HTTPS reverse proxy that lets people reach device
// services by wildcard subdomain (ALIAS.DEVICE.DOMAIN), after authenticating them with
// front-door accounts and checking the same grants as for local users.
package frontdoor
