// Package zmux carries many byte streams inside one SSH channel, compressed with one
// deflate context per direction for the whole session.
//
// x/crypto/ssh has no transport compression and reads each channel in its own
// goroutine, so compressing channel by channel would start every connection with an
// empty dictionary. zmux instead multiplexes the forwarded connections of a session into
// one channel and compresses that channel's byte stream, so headers repeated across
// requests shrink the way they do under OpenSSH's zlib@openssh.com. Streams have their
// own credit-based flow control, so a stream whose reader stalls never blocks the others.
//
// Streams are opened optimistically: the opener may send data at once, and the other
// side either serves the stream or resets it with a reason. With a flush delay (agents
// on radio links) an open and its first data leave in one SSH packet.
package zmux
