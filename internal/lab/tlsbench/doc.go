// Package tlsbench is paper 003's TLS lab (`iotsafe bench tls`): the average time per
// connection over K subsequent connections (fig. 5) for TLS 1.3 full handshakes, session
// resumption and external PSK (psk_ke, psk_dhe_ke), with Go's crypto/tls (the hub's),
// OpenSSL 3.0 and wolfSSL 5.5 (small C helpers built here against Debian's libssl-dev
// and libwolfssl-dev) side by side, client and server of the same implementation. A mode
// an implementation lacks is a cell that says so; DTLS 1.2 with pion/dtls, with and
// without connection IDs. Then figs. 3, 4: TLS 1.3 suites x groups, full handshakes for
// a time window, with Go, OpenSSL and wolfSSL; and fig. 2, the primitives' speed (Go in
// process, OpenSSL's openssl speed, wolfCrypt through the helper); and fig. 6, throughput against payload on one
// connection (Go and the helpers' echo mode). With a link, fig. 5 runs across the emulated link (Go, pion) and
// counts each mode's frames and airtime (netenv.go). Still to come (issue 15): wolfSSL's
// DTLS and the helpers on the link.
package tlsbench
