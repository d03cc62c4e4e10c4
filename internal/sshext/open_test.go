package sshext

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshtest"
)

// sshPair is a real x/crypto SSH connection over loopback TCP; server is the server's
// end, which refuses every channel.
func sshPair(t *testing.T) (client ssh.Conn, server ssh.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(sshtest.Signer(t))
	got := make(chan ssh.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			close(got)
			return
		}
		go ssh.DiscardRequests(reqs)
		go func() {
			for nc := range chans {
				nc.Reject(ssh.Prohibited, "no")
			}
		}()
		got <- sc
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := sshtest.ClientConn(t, c, "x")
	sc := <-got
	if sc == nil {
		t.Fatal("server handshake failed")
	}
	t.Cleanup(func() { sc.Close() })
	return cc, sc
}

// On a live connection OpenChannel answers as x/crypto does (here: the peer's
// refusal); once the peer has closed the connection every open fails, none waits.
func TestOpenChannelAnswersAndEnds(t *testing.T) {
	client, server := sshPair(t)
	ended := Ended(client)
	var oce *ssh.OpenChannelError
	if _, _, err := OpenChannel(client, ended, "session", nil); !errors.As(err, &oce) || oce.Reason != ssh.Prohibited {
		t.Fatalf("open on a live connection: %v", err)
	}
	server.Close()
	<-ended
	for range 100 {
		if _, _, err := OpenChannel(client, ended, "session", nil); err == nil {
			t.Fatal("an open succeeded on an ended connection")
		}
	}
}

// stuckConn is an ssh.Conn whose OpenChannel never returns: the state x/crypto leaves
// an open in when it races the connection's end, which no test can bring about on
// demand (the one stand-in of this package's tests).
type stuckConn struct{ ssh.Conn }

func (stuckConn) OpenChannel(string, []byte) (ssh.Channel, <-chan *ssh.Request, error) {
	select {}
}

// An open that x/crypto never answers returns once the connection has ended.
func TestOpenChannelGivesUpWhenTheConnectionEnds(t *testing.T) {
	ended := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, _, err := OpenChannel(stuckConn{}, ended, "session", nil)
		res <- err
	}()
	close(ended)
	if err := <-res; !errors.Is(err, ErrConnectionEnded) {
		t.Fatalf("got %v, want ErrConnectionEnded", err)
	}
}
