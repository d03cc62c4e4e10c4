package zmux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// readFromPair is a device-side stream fed by ReadFrom from a TCP connection, and the
// hub's end of that stream. feed writes to the TCP connection.
func readFromPair(t *testing.T, o Options) (feed *net.TCPConn, hubEnd *Stream, copied chan error) {
	t.Helper()
	feed, _, hubEnd, copied = readFromSessions(t, o)
	return feed, hubEnd, copied
}

// readFromSessions is readFromPair that also returns the device's session.
func readFromSessions(t *testing.T, o Options) (feed *net.TCPConn, dev *Session, hubEnd *Stream, copied chan error) {
	t.Helper()
	dev, hub := pairMode(t, o)
	go echo(hub) // streams the device opens, after the one below
	st, hubEnd := hubOpens(t, dev, hub)
	a, b := tcpPair(t)
	t.Cleanup(func() { a.Close(); b.Close() })
	copied = make(chan error, 1)
	go func() {
		_, err := st.ReadFrom(b)
		st.CloseWrite()
		copied <- err
	}()
	return a.(*net.TCPConn), dev, hubEnd, copied
}

// hubOpens opens a stream from the hub, as for a forwarded connection, and returns the
// device's end and the hub's.
func hubOpens(t *testing.T, dev, hub *Session) (devEnd, hubEnd *Stream) {
	t.Helper()
	accepted := make(chan *Stream, 1)
	go func() {
		st, _ := dev.Accept()
		accepted <- st
	}()
	hubEnd, err := hub.Open(Target{Kind: Forwarded, Host: "http", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if devEnd = <-accepted; devEnd == nil {
		t.Fatal("the device accepted no stream")
	}
	return devEnd, hubEnd
}

// Every byte read from a TCP connection with readv reaches the peer in order, whatever
// the size of each read: one frame, two, a second one of under 128 bytes (its header
// is a byte shorter), and reads cut short by the stream's window.
func TestReadFromTCPCarriesEveryByte(t *testing.T) {
	sizes := []int{1, 127, 128, MaxData - 1, MaxData, MaxData + 1, MaxData + 127, MaxData + 128,
		packetWrite - 1, packetWrite, packetWrite + 1, 3*Window + 5}
	for _, o := range []Options{{}, {Compress: true}, {Version2: true}} {
		feed, hubEnd, copied := readFromPair(t, o)
		for _, n := range sizes {
			// One size at a time, read whole before the next is written: each read of
			// the socket sees that size (or part of it).
			want := random(n)
			if _, err := feed.Write(want); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if _, err := io.ReadFull(hubEnd, got); err != nil {
				t.Fatalf("%+v, %d bytes: %v", o, n, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%+v, %d bytes: the peer read other bytes", o, n)
			}
		}
		feed.CloseWrite()
		if err := <-copied; err != nil {
			t.Fatalf("ReadFrom ended with %v at the connection's end, want nil", err)
		}
		if rest, err := io.ReadAll(hubEnd); err != nil || len(rest) != 0 {
			t.Fatalf("after the end the peer read %d more bytes and %v, want io.EOF", len(rest), err)
		}
	}
}

// ReadFrom waiting for window on a stream the peer then resets returns the reset.
func TestReadFromEndsAtPeerReset(t *testing.T) {
	feed, hubEnd, copied := readFromPair(t, Options{})
	go feed.Write(make([]byte, 2*Window)) // the hub end never reads: the window runs out
	// Read one byte so the device's first frames have surely arrived, then reset.
	if _, err := io.ReadFull(hubEnd, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	hubEnd.Reset("no more")
	var re *ResetError
	if err := <-copied; !errors.As(err, &re) || re.Reason != "no more" {
		t.Fatalf("ReadFrom returned %v, want the peer's reset", err)
	}
}

// From a reader without a socket, ReadFrom copies through Write.
func TestReadFromOtherReaders(t *testing.T) {
	dev, hub := pairMode(t, Options{Version2: true})
	want := random(5*MaxData + 3)
	go func() {
		st, err := dev.Open(Target{Kind: Direct, Host: "api"})
		if err != nil {
			return
		}
		st.ReadFrom(bytes.NewReader(want))
		st.CloseWrite()
	}()
	st, err := hub.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(st)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(want))
	}
}

// A bulk copy and small writes on other streams share a session: the copy's frames
// wait behind a running writer's queue when one runs, and every stream reads what its
// writer wrote.
func TestReadFromBesideSmallWrites(t *testing.T) {
	o := Options{Compress: true, FlushDelay: time.Millisecond} // small batches hold the writer
	feed, dev, hubEnd, copied := readFromSessions(t, o)
	want := random(4 << 20)
	go func() {
		feed.Write(want)
		feed.CloseWrite()
	}()
	small := make(chan error, 1)
	go func() {
		for i := range 100 {
			st, err := dev.Open(Target{Kind: Direct, Host: "api"})
			if err == nil {
				msg := []byte(fmt.Sprintf("request %d", i))
				st.Write(msg)
				st.CloseWrite()
				var got []byte
				if got, err = io.ReadAll(st); err == nil && !bytes.Equal(got, msg) {
					err = fmt.Errorf("stream %d read back %q", i, got)
				}
			}
			if err != nil {
				small <- err
				return
			}
		}
		small <- nil
	}()
	got, err := io.ReadAll(hubEnd)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the bulk stream read %d bytes (%v), want the %d written", len(got), err, len(want))
	}
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	if err := <-small; err != nil {
		t.Fatal(err)
	}
}

// A local connection reset ends ReadFrom with that error, not as a clean end.
func TestReadFromConnectionReset(t *testing.T) {
	feed, _, copied := readFromPair(t, Options{})
	feed.Write([]byte("partial"))
	feed.SetLinger(0)
	feed.Close()
	if err := <-copied; err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("ReadFrom returned %v, want the connection's reset", err)
	}
}
