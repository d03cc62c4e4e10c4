package acceptor

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func unixListener(t *testing.T) (net.Listener, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, path
}

func hello(c net.Conn) { io.WriteString(c, "hi"); c.Close() }

// readAll reads what the server says before it closes; a hang fails by the deadline.
func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v (a client left hanging?)", err)
	}
	return string(b)
}

// Running out of descriptors does not stop the loop: the pending client is told (closed,
// not left hanging), and once descriptors are free again clients are served.
func TestOutOfDescriptorsIsSurvived(t *testing.T) {
	ln, path := unixListener(t)
	done := make(chan error, 1)
	go func() { done <- Serve(ln, Config{Name: "test"}, hello) }()

	if got := readAll(t, dial(t, path)); got != "hi" {
		t.Fatalf("before: %q", got)
	}
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	low := lim
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	// Fill every descriptor but one, which the client takes.
	var filler []*os.File
	t.Cleanup(func() {
		for _, f := range filler {
			f.Close()
		}
	})
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		filler = append(filler, f)
	}
	filler[len(filler)-1].Close()
	filler = filler[:len(filler)-1]
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial with one descriptor left: %v", err)
	}
	if got := readAll(t, c); got != "" {
		t.Fatalf("with no descriptor left the server answered %q; want a close", got)
	}
	for _, f := range filler {
		f.Close()
	}
	filler = nil
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	if got := readAll(t, dial(t, path)); got != "hi" {
		t.Fatalf("after descriptors came back: %q", got)
	}
	ln.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}

func dial(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// One peer holds at most PerPeer connections; others are not affected.
func TestPerPeerCap(t *testing.T) {
	ln, path := unixListener(t)
	release := make(chan struct{})
	peer := "a"
	go Serve(ln, Config{Name: "test", PerPeer: 2, Peer: func(net.Conn) string { return peer }}, func(c net.Conn) {
		io.WriteString(c, "hi")
		<-release
		c.Close()
	})
	buf := make([]byte, 2)
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c := dial(t, path)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("connection %d within the cap: %v", i, err)
		}
		held = append(held, c)
	}
	if got := readAll(t, dial(t, path)); got != "" {
		t.Fatalf("a third connection of the peer was served: %q", got)
	}
	close(release)
	for _, c := range held {
		readAll(t, c)
	}
	c := dial(t, path)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("after the peer's connections ended: %v", err)
	}
	c.Close()
}

// LimitPerPeer: a peer over its cap is closed at once and reported; closing one of its
// connections makes room again.
func TestLimitPerPeer(t *testing.T) {
	base, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan string, 10)
	ln := LimitPerPeer(base, 2, PeerHost, func(p string) { refused <- p })
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", base.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial()
	dial()
	a1, _ := <-accepted, <-accepted
	extra := dial()
	if p := <-refused; p != "127.0.0.1" {
		t.Fatalf("refused peer %q", p)
	}
	if got := readAll(t, extra); got != "" {
		t.Fatalf("the connection over the cap got %q", got)
	}
	a1.Close()
	dial()
	<-accepted // room again
}

// scriptedListener returns its errors in turn, then the real listener's connections.
type scriptedListener struct {
	net.Listener
	errs []error
}

func (s *scriptedListener) Accept() (net.Conn, error) {
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	return s.Listener.Accept()
}

// A server with its own loop (net/http) behind Retrying never sees a temporary error:
// running out of descriptors, an aborted connection; it sees the close, and other errors.
func TestRetryingHidesTemporaryErrors(t *testing.T) {
	ln, path := unixListener(t)
	var logged syncBuffer
	r := Retrying(&scriptedListener{Listener: ln, errs: []error{
		&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)},
		&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ECONNABORTED)},
	}}, "test", slog.New(slog.NewTextHandler(&logged, nil)))
	go func() { c := dial(t, path); c.Close() }()
	c, err := r.Accept()
	if err != nil {
		t.Fatalf("Accept returned %v; want the connection after the errors", err)
	}
	c.Close()
	if !strings.Contains(logged.String(), "accept failed; retrying") || !strings.Contains(logged.String(), "too many open files") {
		t.Fatalf("the error was not logged: %s", logged.String())
	}
	fatal := &scriptedListener{Listener: ln, errs: []error{errors.New("not temporary")}}
	if _, err := Retrying(fatal, "test", nil).Accept(); err == nil || err.Error() != "not temporary" {
		t.Fatalf("a fatal error: %v", err)
	}
	ln.Close()
	if _, err := r.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
