// Package deferrednil is an analyzer for one crash: a named result of func or interface
// type that a return statement sets to nil while a deferred closure calls it (issue 56:
// the hub's forward.open returned a nil release on its error paths, and its deferred
// cleanup called release, so any device refusing a channel took the hub down).
package deferrednil
