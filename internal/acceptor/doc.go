// Package acceptor is the one accept loop of the hub's listeners (the resolver and admin
// sockets, protected sockets, the SSH listener): it never gives up on a temporary error
// such as running out of descriptors (it backs off, logs once a minute, and sheds the
// pending connection with a reserved descriptor so its client gets a close, not a hang),
// and it can cap the connections one peer (a uid, an address) holds at once, in its own
// loop (Serve) or as a net.Listener for net/http (LimitPerPeer).
package acceptor
