// Package netready wakes a server when one of many idle connections has input, so that
// an idle connection needs no goroutine of its own.
//
// A Go server usually parks one goroutine per connection in Read. The goroutine keeps
// its stack while it waits, and after the deep work of a request that stack stays at
// 8 KiB or more however shallow the wait (the runtime shrinks it only while it uses
// under a quarter of it). For an MQTT hub with thousands of idle devices that was the
// largest part of its memory per connection (issue 54). Here a connection that has
// nothing to read is Armed instead: one epoll instance for the process, watched by one
// goroutine, reports when the socket has input or hangs up, and a timer when the
// connection's read deadline passes; the Wait then calls its wake function once, which
// starts a goroutine to read. Wake wakes an armed Wait at once (its connection is being
// closed).
//
// The socket is registered with EPOLLONESHOT and re-armed for each idle period, and
// every epoll_ctl runs inside the connection's syscall.RawConn Control, so it never
// reaches a descriptor number that a closed connection gave back to the system. A
// closed socket leaves the epoll set by itself.
//
// On systems without epoll, New fails and callers keep a goroutine per connection.
package netready
