// Package tunnel copies bytes between a device stream (an SSH channel, or a stream of
// the session's compressed multiplexer) and a TCP connection with half-close, pooled
// buffers and byte counts: the data path of every forward.
package tunnel
