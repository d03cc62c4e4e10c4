package zmux

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"testing"

	"golang.org/x/crypto/ssh"
)

// sshChannelPair returns the two ends of one channel of a real x/crypto SSH connection
// over loopback TCP: the layer zmux runs on in the hub and the agent.
func sshChannelPair(tb testing.TB) (client, server ssh.Channel) {
	tb.Helper()
	a, b := tcpPair(tb)
	_, hk, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromSigner(hk)
	scfg := &ssh.ServerConfig{NoClientAuth: true}
	scfg.AddHostKey(signer)
	got := make(chan ssh.Channel, 1)
	go func() {
		_, chans, reqs, err := ssh.NewServerConn(b, scfg)
		if err != nil {
			close(got)
			return
		}
		go ssh.DiscardRequests(reqs)
		nc := <-chans
		ch, r, err := nc.Accept()
		if err != nil {
			close(got)
			return
		}
		go ssh.DiscardRequests(r)
		got <- ch
	}()
	cc, chans, reqs, err := ssh.NewClientConn(a, "x", &ssh.ClientConfig{User: "x", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		tb.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans {
			nc.Reject(ssh.Prohibited, "")
		}
	}()
	c := ssh.NewClient(cc, nil, nil)
	tb.Cleanup(func() { c.Close() })
	ch, r, err := c.OpenChannel("bulk", nil)
	if err != nil {
		tb.Fatal(err)
	}
	go ssh.DiscardRequests(r)
	server = <-got
	if server == nil {
		tb.Fatal("server side of the channel failed")
	}
	return ch, server
}

const bulkChunk = 32 << 10

func sendBulk(b *testing.B, w io.Writer) {
	buf := make([]byte, bulkChunk)
	rand.Read(buf)
	b.SetBytes(bulkChunk)
	b.ResetTimer()
	for range b.N {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// Bulk throughput of one forwarded connection: a plain SSH channel against a zmux stream
// (framing version 2, the agent's default) in the same kind of channel.
func BenchmarkBulkPlainChannel(b *testing.B) {
	c, s := sshChannelPair(b)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, s); close(done) }()
	sendBulk(b, c)
	c.CloseWrite()
	<-done
}

func BenchmarkBulkStream(b *testing.B) {
	c, s := sshChannelPair(b)
	hub := New(s, Options{Version2: true})
	dev := New(c, Options{Device: true, Version2: true})
	defer dev.Close()
	defer hub.Close()
	done := make(chan struct{})
	go func() {
		st, err := hub.Accept()
		if err == nil {
			io.Copy(io.Discard, st)
		}
		close(done)
	}()
	st, err := dev.Open(Target{Kind: Direct, Host: "bulk", Port: 1})
	if err != nil {
		b.Fatal(err)
	}
	sendBulk(b, st)
	st.CloseWrite()
	<-done
}
