// Package memrelease gives the hub's memory back to the system once a burst is over.
//
// Go's collector lets the heap grow to twice what is live before it collects, returns
// freed pages to the system slowly, and shrinks a goroutine's stack only at a
// collection, by half each time. After a burst (a fleet reconnecting: a TLS handshake
// per device; a storm of messages: every client goroutine's stack grown deep), a hub
// would keep the burst's memory for minutes. This package watches the allocation rate;
// when it stays low for a few seconds after a burst, it collects four times (stacks
// halve each time) and returns the free pages at once, so an idle hub holds about what its
// connections need (issue 54: "an active connection returns to the idle figure once it
// goes idle"). It never runs while the hub is busy.
package memrelease
