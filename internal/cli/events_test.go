package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// watchedBuffer is an output that says when it was written to.
type watchedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.b.Write(p)
}

// waitFor blocks until the output holds s; the minute is a failure guard.
func (w *watchedBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	guard := time.After(time.Minute)
	for {
		w.mu.Lock()
		got := w.b.String()
		w.mu.Unlock()
		if strings.Contains(got, s) {
			return
		}
		select {
		case <-w.wrote:
		case <-guard:
			t.Fatalf("the output never held %q:\n%s", s, got)
		}
	}
}

// 'events --follow --json' prints what is recorded after it started, one JSON object per
// line, and ends cleanly on Ctrl-C (issue 52.9).
func TestEventsFollow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Execute(context.Background(), append(args, "--data", dir), nil, &out, &errOut); code != 0 {
			t.Fatalf("iotsafe %v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
	}
	run("init")
	run("device", "add", "dev1", "--keygen", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	out := &watchedBuffer{wrote: make(chan struct{}, 1)}
	done := make(chan int)
	go func() {
		done <- Execute(ctx, []string{"events", "--follow", "--json", "--device", "dev2", "--data", dir}, nil, out, &bytes.Buffer{})
	}()
	run("device", "add", "dev2", "--keygen", t.TempDir())
	out.waitFor(t, `"kind":"device_added"`)
	run("device", "revoke", "dev2", "--reason", "followed")
	out.waitFor(t, `"kind":"revoked"`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("events --follow ended with %d on Ctrl-C", code)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	if len(lines) != 2 || strings.Contains(out.b.String(), "dev1") {
		t.Fatalf("followed events of dev2, one per line; got:\n%s", out.b.String())
	}
}
