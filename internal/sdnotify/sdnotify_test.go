package sdnotify

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen is the manager's end: a datagram socket like systemd's notify socket.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func next(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound on a hang, not a timing check
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestMessagesReachThePathSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	n, err := New(path, "", "", 1)
	if err != nil || !n.Enabled() {
		t.Fatalf("parse: %v", err)
	}
	if err := n.Ready("3 devices\nonline"); err != nil {
		t.Fatal(err)
	}
	// A newline in the status would be a field of its own (here: "online").
	if got := next(t, c); got != "READY=1\nSTATUS=3 devices online" {
		t.Fatalf("ready: %q", got)
	}
	n.Status("3 devices online") // unchanged: not sent again
	n.Status("4 devices online")
	if got := next(t, c); got != "STATUS=4 devices online" {
		t.Fatalf("status: %q", got)
	}
	n.Reloading()
	if got := next(t, c); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("reloading: %q", got)
	}
	n.Stopping("")
	if got := next(t, c); got != "STOPPING=1" {
		t.Fatalf("stopping: %q", got)
	}
}

func TestAbstractSocket(t *testing.T) {
	name := "iotsafe-sdnotify-test-" + filepath.Base(t.TempDir())
	c := listen(t, "\x00"+name)
	n, err := New("@"+name, "", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	n.Watchdog()
	if got := next(t, c); got != "WATCHDOG=1" {
		t.Fatalf("got %q", got)
	}
}

func TestWithoutManagerNothingIsSent(t *testing.T) {
	var nilN *Notifier
	for _, n := range []*Notifier{nilN, {}} {
		if n.Enabled() || n.WatchdogInterval() != 0 {
			t.Fatal("enabled without a socket")
		}
		if err := n.Ready("x"); err != nil {
			t.Fatal(err)
		}
		n.Keep(context.Background(), time.Millisecond, func() (string, error) { t.Fatal("checked without a manager"); return "", nil }, nil)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		sock, usec, pid string
		want            time.Duration
		err             string
	}{
		{sock: "/run/notify", usec: "30000000", want: 30 * time.Second},
		{sock: "/run/notify", usec: "30000000", pid: "42", want: 30 * time.Second},
		{sock: "/run/notify", usec: "30000000", pid: "43"}, // another process's watchdog
		{sock: "/run/notify", usec: "abc", err: "WATCHDOG_USEC"},
		{sock: "/run/notify", usec: "0", err: "WATCHDOG_USEC"},
		{sock: "/run/notify", usec: "1", pid: "x", err: "WATCHDOG_PID"},
		{sock: "vsock:2:1234", err: "NOTIFY_SOCKET"},
		{sock: "relative/path", err: "NOTIFY_SOCKET"},
		{usec: "30000000"}, // no socket, no watchdog
	} {
		n, err := New(tc.sock, tc.usec, tc.pid, 42)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: error %v, want one naming %s", tc, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.err == "" && n.WatchdogInterval() != tc.want:
			t.Errorf("%+v: watchdog %v, want %v", tc, n.WatchdogInterval(), tc.want)
		}
	}
}

// Keep sends the status and a keep-alive while the check passes, skips the keep-alive
// when it fails, reports a send that fails, and stops with its context.
func TestKeep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	n, _ := New(path, "2000", "", 1) // 2 ms: checks every millisecond, whatever the period
	checked := make(chan int, 1)
	checks := 0
	check := func() (string, error) {
		checks++
		if checks == 2 {
			checked <- checks
			return "", errors.New("registry stuck")
		}
		return "1 device online", nil
	}
	var failures []error
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		n.Keep(ctx, time.Hour, check, func(err error) { failures = append(failures, err) })
		close(done)
	}()
	for _, want := range []string{"STATUS=1 device online", "WATCHDOG=1"} {
		if got := next(t, c); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	<-checked
	// The third check passes: a keep-alive, and no status (unchanged).
	if got := next(t, c); got != "WATCHDOG=1" {
		t.Fatalf("after a failed check: %q", got)
	}
	cancel()
	<-done
	if len(failures) != 0 {
		t.Fatalf("a failed check reported as a failed send: %v", failures)
	}

	// The manager's socket gone: the failed send is reported.
	c.Close()
	os.Remove(path)
	n.Keep(ctx, time.Hour, func() (string, error) { return "x", nil }, func(err error) { failures = append(failures, err) })
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "sdnotify: telling the service manager") {
		t.Fatalf("failures %v", failures)
	}
}
