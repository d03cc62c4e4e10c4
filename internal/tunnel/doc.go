// Package tunnel copies bytes between an SSH channel and a TCP connection with
// half-close, pooled buffers and byte counts: the data path of every forward.
package tunnel
