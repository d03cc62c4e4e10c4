// Package wsbench is 'iotsafe bench websocket', the lab of DeviceHive's WebSocket API
// (paper 004's clients): how fast one device stores notifications over one socket
// beside REST over one keep-alive connection, in the same run on the same hub, and what
// a held subscription costs the hub (subscribers per GiB) beside the REST long poll a
// device would hold instead.
package wsbench
