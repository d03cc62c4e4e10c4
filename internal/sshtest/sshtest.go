package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Signer is a new ed25519 key; the test fails if it cannot be made.
func Signer(t testing.TB) ssh.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ClientConn runs the client side of an SSH handshake over c as user, taking any host
// key. The peer's global requests are discarded and the channels it opens refused; the
// connection is closed when the test ends.
func ClientConn(t testing.TB, c net.Conn, user string) ssh.Conn {
	t.Helper()
	cc, chans, reqs, err := ssh.NewClientConn(c, "x", &ssh.ClientConfig{User: user, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans {
			nc.Reject(ssh.Prohibited, "no")
		}
	}()
	t.Cleanup(func() { cc.Close() })
	return cc
}
