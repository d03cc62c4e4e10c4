// Package pki holds the hub's certificates: the local CA (server certificates for the
// front door and the MQTT TLS listener, issued on demand under a name rule the caller
// gives; client certificates for devices) and an operator's certificate files, re-read
// when they change. It was part of the front door until MQTT needed it too.
package pki
