// Package scan reports the security posture of an endpoint (`iotsafe scan`, paper
// 003's security analysis): for TLS, the versions and cipher suites it accepts (probed
// with hand-made ClientHellos, so that suites and versions no Go peer would offer are
// found too), its key-exchange groups, certificate, downgrade protection, secure
// renegotiation, compression, resumption, ALPN and, over HTTPS, HSTS; for MQTT over TLS
// whether an anonymous login is accepted; and whether the endpoint still serves after
// malformed and oversized input. Each finding has a severity; a scan can fail at or
// above one (for CI).
package scan
