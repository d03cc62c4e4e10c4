// Package wssecbench is paper 001's lab (`iotsafe bench wssec`): SOAP device messages
// secured with WS Compact Security and WS Security Records (package wssec) against the
// same messages over TLS, by message size (tables I, II, IV) and round-trip time over a
// kept-alive connection (tables III, V), with deflate on the HTTP body (table VI), and
// what each exchange costs on the lab's 802.15.4 link model (frames, bytes on the air,
// radio energy). The paper's TLS record compression no longer exists; the report says
// so instead of faking the row.
package wssecbench
