// Package contain keeps a panic in one connection's goroutine from taking the whole
// hub down: the goroutine's deferred Recover logs the panic with its stack as an error
// event, closes only that connection, and counts it (iotsafe_panics_total). Panics
// elsewhere still end the process, and the service manager restarts it
// (docs/design.md, "Containing a crash").
package contain
