// Package tls13conn carries a TLS 1.3 connection's records itself once Go's crypto/tls
// has done the handshake, so that an idle connection holds no buffer.
//
// Why: a *tls.Conn keeps, for as long as it lives, the input and handshake buffers its
// handshake grew (sized by the ClientHello, which a post-quantum key share makes large)
// and its record scratch: about 3 KiB per connection that a broker holding thousands of
// idle MQTT clients pays for nothing (issue 54). Here the handshake, with everything
// that needs care in it (certificates, key exchange, client authentication, tickets), is
// crypto/tls's; only the record protection of RFC 8446 section 5 is this package's, and
// it takes a buffer only while a record is being read or written.
//
// How the keys get here: crypto/tls reports each connection's traffic secrets to its
// Config.KeyLogWriter, a public API meant for debugging. The writer installed here keeps
// them in memory only, for the connection being set up, keyed by the ClientHello's
// random, and forgets them when the handshake ends; they never leave the process,
// which already holds them. While the handshake runs, the connection under crypto/tls
// reads whole records and nothing beyond them, so crypto/tls has consumed exactly the
// client's Finished when it returns; the records the server sent under its application
// key during the handshake (session tickets) are counted by trying that key on them.
//
// A connection that negotiates TLS 1.2 stays a *tls.Conn.
package tls13conn
