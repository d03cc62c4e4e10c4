// Package resolver answers the paper's resolution queries: a local process asks for
// DEVICE/ALIAS on a Unix socket and gets the protected socket's address if the uid and
// groups the kernel reports for it (SO_PEERCRED) hold a permission.
//
// Protocol (one request per line, at most 512 bytes, several per connection):
//
//	RESOLVE <device> <alias>\n
//	-> OK <address:port>\n
//	-> ERR <code> <message>\n     code: denied | notfound | badrequest | unavailable
package resolver
