package zmux

import (
	"crypto/rand"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshtest"
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
	scfg := &ssh.ServerConfig{NoClientAuth: true}
	scfg.AddHostKey(sshtest.Signer(tb))
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
	ch, r, err := sshtest.ClientConn(tb, a, "x").OpenChannel("bulk", nil)
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

// sendBulk writes b.N chunks of the given size to w and reports the sender's TCP writes
// per MiB (each one a system call and at least one SSH packet).
func sendBulk(b *testing.B, w io.Writer, writes *atomic.Int64, bulkChunk int) {
	buf := make([]byte, bulkChunk)
	rand.Read(buf)
	b.SetBytes(int64(bulkChunk))
	b.ResetTimer()
	before := writes.Load()
	for range b.N {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(writes.Load()-before)/(float64(b.N)*float64(bulkChunk)/(1<<20)), "writes/MiB")
}

// Bulk throughput of one forwarded connection: a plain SSH channel against a zmux stream
// (framing version 2, the agent's default) in the same kind of channel.
func BenchmarkBulkPlainChannel(b *testing.B) {
	var writes atomic.Int64
	c, s := sshChannelPair(b, &writes)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, s); close(done) }()
	sendBulk(b, c, &writes, 32<<10) // io.Copy's buffer
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
	sendBulk(b, st, &writes, packetWrite) // what tunnel.Pipe writes
	st.CloseWrite()
	<-done
}

// writeSizes records the size of every write to a connection.
type writeSizes struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(p))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

func (w *writeSizes) snapshot() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.sizes...)
}

// A bulk Write of packetWrite bytes reaches the channel as one write that fits one SSH
// packet of 32 KiB, frame headers included, and Write returns once it is there: the
// writing goroutine sent it itself rather than starting a writer for it.
func TestBulkWriteIsOnePacketSentByTheWriter(t *testing.T) {
	a, b := tcpPair(t)
	rec := &writeSizes{Conn: a}
	dev, hub := New(rec, Options{Device: true}), New(b, Options{})
	t.Cleanup(func() { dev.Close(); hub.Close() })
	// The hub opens the stream: the device has queued nothing of its own when it writes.
	st, hs := hubOpens(t, dev, hub)
	read := make(chan int64, 1)
	go func() { n, _ := io.Copy(io.Discard, hs); read <- n }()
	data := random(packetWrite)
	const writes = Window / packetWrite // within the stream's window: no wait for credit
	for i := range writes {
		if _, err := st.Write(data); err != nil {
			t.Fatal(err)
		}
		sizes := rec.snapshot()
		if len(sizes) != i+1 {
			t.Fatalf("after write %d the channel had %d writes, want %d", i+1, len(sizes), i+1)
		}
		if sizes[i] > 32<<10 {
			t.Fatalf("write %d reached the channel as %d bytes: more than one SSH packet", i+1, sizes[i])
		}
	}
	st.CloseWrite()
	if n := <-read; n != int64(writes*packetWrite) {
		t.Fatalf("the hub read %d bytes, want %d", n, writes*packetWrite)
	}
}
