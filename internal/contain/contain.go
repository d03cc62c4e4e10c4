package contain

import (
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sort"
	"sync"
)

// The panics contained so far, by component. Process-wide on purpose: a panic is a
// fault of the process, counted where it is caught, and threading a metrics handle
// through every connection's goroutine would add a dependency to each package for a
// counter that should stay at zero.
var (
	mu     sync.Mutex
	counts = map[string]uint64{}
)

// Recover must be deferred directly at the top of a goroutine that serves one
// connection (recover works only in the deferred call itself). A panic is logged at
// error level with event=panic, the component, the value and the goroutine's stack,
// conn (if not nil) is closed, and the goroutine ends as if it had returned.
//
// Only per-connection goroutines may use it: they hold the state of their connection
// and shared tables only under locks released by defer, so the rest of the process is
// as it was. A panic that leaves a lock held stalls the hub, which the service
// manager's watchdog then restarts.
func Recover(log *slog.Logger, component string, conn io.Closer) {
	r := recover()
	if r == nil {
		return
	}
	record(log, component, r)
	if conn != nil {
		conn.Close()
	}
}

func record(log *slog.Logger, component string, r any) {
	mu.Lock()
	counts[component]++
	mu.Unlock()
	if log == nil {
		log = slog.Default()
	}
	log.Error("panic contained: one connection closed, the hub goes on", "event", "panic",
		"component", component, "panic", r, "stack", string(debug.Stack()))
}

// HTTP wraps a handler so that a panic serving one request is logged and counted like
// any other contained panic, then aborts that request's connection (net/http would
// recover it too, but only print it to the server's error log).
func HTTP(log *slog.Logger, component string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v != http.ErrAbortHandler { // a handler's own way to abort: not a fault
				record(log, component, v)
			}
			panic(http.ErrAbortHandler)
		}()
		h.ServeHTTP(w, r)
	})
}

// CloseFunc is a function as an io.Closer: what Recover closes when closing takes more
// than a connection's Close (a session to end and record).
type CloseFunc func() error

// Close calls f.
func (f CloseFunc) Close() error { return f() }

// Count is the panics contained in one component.
type Count struct {
	Component string
	Panics    uint64
}

// Counts lists the panics contained so far, by component, in name order.
func Counts() []Count {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Count, 0, len(counts))
	for c, n := range counts {
		out = append(out, Count{Component: c, Panics: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Component < out[j].Component })
	return out
}
