package zmux

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
)

// writeCounter counts the writes to a connection: a system call and an SSH packet each.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w writeCounter) Write(p []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(p)
}

// sshChannelPair returns the two ends of one channel of a real x/crypto SSH connection
// over loopback TCP: the layer zmux runs on in the hub and the agent. writes counts the
// client's writes to its TCP connection.
func sshChannelPair(tb testing.TB, writes *atomic.Int64) (client, server ssh.Channel) {
	tb.Helper()
	a0, b := tcpPair(tb)
	a := writeCounter{Conn: a0, n: writes}
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

// sendBulk writes b.N chunks to w and reports the sender's TCP writes per MiB (each one
// a system call and at least one SSH packet).
func sendBulk(b *testing.B, w io.Writer, writes *atomic.Int64) {
	buf := make([]byte, bulkChunk)
	rand.Read(buf)
	b.SetBytes(bulkChunk)
	b.ResetTimer()
	before := writes.Load()
	for range b.N {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(writes.Load()-before)/(float64(b.N)*bulkChunk/(1<<20)), "writes/MiB")
}

// Bulk throughput of one forwarded connection: a plain SSH channel against a zmux stream
// (framing version 2, the agent's default) in the same kind of channel.
func BenchmarkBulkPlainChannel(b *testing.B) {
	var writes atomic.Int64
	c, s := sshChannelPair(b, &writes)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, s); close(done) }()
	sendBulk(b, c, &writes)
	c.CloseWrite()
	<-done
}

func BenchmarkBulkStream(b *testing.B) {
	var writes atomic.Int64
	c, s := sshChannelPair(b, &writes)
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
	sendBulk(b, st, &writes)
	st.CloseWrite()
	<-done
}
