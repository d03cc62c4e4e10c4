package firewall

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPeerUIDOfOwnConnection(t *testing.T) {
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", network)
		if err != nil {
			t.Logf("%s: %v (no IPv6 here?)", network, err)
			continue
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, _ := ln.Accept()
		defer s.Close()
		uid, err := PeerUID(s)
		if err != nil || uid != uint32(os.Getuid()) {
			t.Fatalf("%s: uid %d %v, want %d", network, uid, err, os.Getuid())
		}
	}
}

// A connection from a process running under another uid reports that uid. Needs root to
// start the child under another uid; as any other user the test checks only the own uid.
func TestPeerUIDOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Log("not root: cannot start a child under another uid; covered by TestPeerUIDOfOwnConnection")
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	// bash's /dev/tcp opens a real TCP connection from the child's uid.
	cmd := exec.Command("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+"; read -u 3 line")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4321, Gid: 4321}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uid, err := PeerUID(s)
	if err != nil || uid != 4321 {
		t.Fatalf("uid %d %v, want 4321", uid, err)
	}
	s.Write([]byte("bye\n"))
}

func TestPeerNotFound(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	// A made-up peer: no such socket exists.
	_, err := socketUID(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, ln.Addr().(*net.TCPAddr))
	if !errors.Is(err, ErrPeerNotFound) {
		t.Fatalf("want ErrPeerNotFound, got %v", err)
	}
}

// Pooled sock_diag sockets stay in step: many lookups, found and not found in turn, each
// get their own answer.
func TestPeerUIDReusesSockets(t *testing.T) {
	s := acceptedLoopback(t)
	for i := range 300 {
		if i%3 == 2 {
			if _, err := socketUID(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, s.LocalAddr().(*net.TCPAddr)); !errors.Is(err, ErrPeerNotFound) {
				t.Fatalf("lookup %d: want ErrPeerNotFound, got %v", i, err)
			}
			continue
		}
		if uid, err := PeerUID(s); err != nil || uid != uint32(os.Getuid()) {
			t.Fatalf("lookup %d: %d %v", i, uid, err)
		}
	}
}

// acceptedLoopback is the server side of a loopback TCP connection of this process.
func acceptedLoopback(tb testing.TB) net.Conn {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkPeerUID is the user-space layer's cost per accepted connection.
func BenchmarkPeerUID(b *testing.B) {
	s := acceptedLoopback(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PeerUID(s); err != nil {
			b.Fatal(err)
		}
	}
}

// diagMessage builds one netlink message as the kernel sends it.
func diagMessage(typ uint16, seq uint32, data []byte) []byte {
	m := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(data)+4)
	binary.NativeEndian.PutUint32(m[0:], uint32(unix.NLMSG_HDRLEN+len(data)))
	binary.NativeEndian.PutUint16(m[4:], typ)
	binary.NativeEndian.PutUint32(m[8:], seq)
	m = append(m, data...)
	for len(m)%unix.NLMSG_ALIGNTO != 0 {
		m = append(m, 0)
	}
	return m
}

func TestParseDiagAnswer(t *testing.T) {
	answer := make([]byte, msgUIDOffset+8)
	binary.NativeEndian.PutUint32(answer[msgUIDOffset:], 1005)
	errno := func(e unix.Errno) []byte {
		b := make([]byte, 4)
		binary.NativeEndian.PutUint32(b, uint32(-int32(e)))
		return b
	}
	cases := []struct {
		name    string
		in      []byte
		uid     uint32
		done    bool
		wantErr error
		anyErr  bool
	}{
		{"answer", diagMessage(sockDiagByFamily, 7, answer), 1005, true, nil, false},
		{"stale answer first", append(diagMessage(sockDiagByFamily, 6, make([]byte, 3)), diagMessage(sockDiagByFamily, 7, answer)...), 1005, true, nil, false},
		{"only a stale answer", diagMessage(sockDiagByFamily, 6, answer), 0, false, nil, false},
		{"no such socket", diagMessage(unix.NLMSG_ERROR, 7, errno(unix.ENOENT)), 0, true, ErrPeerNotFound, false},
		{"kernel error", diagMessage(unix.NLMSG_ERROR, 7, errno(unix.EPERM)), 0, true, unix.EPERM, false},
		{"short answer", diagMessage(sockDiagByFamily, 7, answer[:msgUIDOffset]), 0, true, nil, true},
		{"length past the datagram", diagMessage(sockDiagByFamily, 7, answer)[:40], 0, false, nil, true},
		{"length below a header", []byte{4, 0, 0, 0, 20, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0}, 0, false, nil, true},
		{"empty", nil, 0, false, nil, false},
	}
	for _, c := range cases {
		uid, done, err := parseDiagAnswer(c.in, 7)
		if uid != c.uid || done != c.done {
			t.Errorf("%s: uid %d done %v, want %d %v", c.name, uid, done, c.uid, c.done)
		}
		switch {
		case c.wantErr != nil && !errors.Is(err, c.wantErr):
			t.Errorf("%s: err %v, want %v", c.name, err, c.wantErr)
		case c.anyErr && err == nil:
			t.Errorf("%s: no error", c.name)
		case c.wantErr == nil && !c.anyErr && err != nil:
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
