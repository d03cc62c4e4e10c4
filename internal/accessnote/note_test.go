package accessnote

import (
	"context"
	"testing"
)

func TestSetReachesTheListenersNote(t *testing.T) {
	ctx, n := With(context.Background())
	Set(ctx, "alice", "")
	if n.User != "alice" || n.Device != "" {
		t.Fatalf("%+v", n)
	}
	Set(context.Background(), "bob", "dev1") // no note: nothing to do, no panic
}
