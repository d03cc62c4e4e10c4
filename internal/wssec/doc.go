// Package wssec writes and checks the two compact forms of WS-Security of paper 001 for
// SOAP device messages, and maps them to classic WS-Security:
//
//   - WS Compact Security (CSec): WS-Discovery's compact signature (d:Sig) over the
//     addressing headers, a timestamp and the plain Body, plus a compact encryption
//     header (c:Enc) for the Body's encrypted content.
//   - WS Security Records (SecRec): the Body replaced by one c:Record whose CipherData is
//     the payload and its authentication, encrypted in one run, like a TLS record.
//
// Keys are pre-shared per device and named by id; each suite derives its cipher and MAC
// keys from the device key with HKDF. The modern suites (AES-GCM, ChaCha20-Poly1305,
// HMAC-SHA256) are the default; the paper's AES-128-CBC with SHA-1 is accepted only when
// a receiver's policy opts in, and RC4 only in the lab. A Receiver checks a message's
// time and id against a replay window.
//
// Messages come from the network, so Parse refuses what a device message never needs
// (DTDs, entities, processing instructions, deep nesting, huge attributes) before
// anything else looks at them, and the receiver acts only on elements found in their
// place and covered by the signature (no signature wrapping). Digests and signatures
// use exclusive canonicalization as XML-Signature does, so the adapters in classic.go can
// turn a compact message into XML-Signature and XML-Encryption that xmlsec1 verifies and
// decrypts, and back, without the key and without loss.
package wssec
