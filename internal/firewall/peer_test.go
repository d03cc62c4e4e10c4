package firewall

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
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
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	c, _ := net.Dial("tcp", ln.Addr().String())
	defer c.Close()
	s, _ := ln.Accept()
	defer s.Close()
	for i := range 300 {
		if i%3 == 2 {
			if _, err := socketUID(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, ln.Addr().(*net.TCPAddr)); !errors.Is(err, ErrPeerNotFound) {
				t.Fatalf("lookup %d: want ErrPeerNotFound, got %v", i, err)
			}
			continue
		}
		if uid, err := PeerUID(s); err != nil || uid != uint32(os.Getuid()) {
			t.Fatalf("lookup %d: %d %v", i, uid, err)
		}
	}
}
