// Package tlspolicy is the one TLS policy type of every TLS listener of the hub (the
// front door, the MQTT listener) and of the MQTT bridge's client: versions, TLS 1.2
// cipher suites by OpenSSL or IANA name, key-exchange groups and session tickets,
// validated with errors that name the setting, and applied to a crypto/tls config. Its
// defaults are the safe ones: TLS 1.2 and 1.3, ECDHE suites with AEAD ciphers only (no
// CBC, no SHA-1 MAC, no RSA key exchange), Go's groups (X25519MLKEM768 first), session
// tickets on, sealed with keys of the listener's own that live a day (tickets.go), not
// Go's week. Anything weaker needs allow_insecure, and is reported so the hub warns
// about it.
package tlspolicy
