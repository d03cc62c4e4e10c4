package accessnote

import "context"

// Note is what the handler tells the access log. It is written and read by the goroutine
// serving the request (the log line is written after the handler returns).
type Note struct {
	User   string // an account
	Device string // a device calling for itself
}

type key struct{}

// With returns ctx carrying a new, empty note for handlers to fill.
func With(ctx context.Context) (context.Context, *Note) {
	n := &Note{}
	return context.WithValue(ctx, key{}, n), n
}

// Set records the caller in ctx's note; without one (a listener that keeps no access log)
// it does nothing.
func Set(ctx context.Context, user, device string) {
	if n, ok := ctx.Value(key{}).(*Note); ok {
		n.User, n.Device = user, device
	}
}
