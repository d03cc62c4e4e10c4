package agent

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshtest"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// muxHub is the hub's side of the multiplexed channel over a real x/crypto SSH
// connection. With v1Only it answers as hubs before framing version 2 did (the e2e
// tests run the current hub): an unknown mode for "none/2". Every stream is echoed.
func muxHub(t *testing.T, v1Only bool) (ssh.Conn, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(sshtest.Signer(t))
	accepted := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			var req sshext.MuxOpen
			ssh.Unmarshal(nc.ExtraData(), &req)
			mode, v2 := sshext.MuxMode(req.Mode)
			if nc.ChannelType() != sshext.MuxChannel || mode != sshext.MuxPlain || v2 && v1Only {
				nc.Reject(ssh.UnknownChannelType, "unknown mode "+req.Mode)
				continue
			}
			ch, r, _ := nc.Accept()
			accepted <- req.Mode
			go ssh.DiscardRequests(r)
			m := zmux.New(ch, zmux.Options{Version2: v2})
			go func() {
				for {
					st, err := m.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(st, st); st.CloseWrite() }()
				}
			}()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return sshtest.ClientConn(t, c, "dev1"), accepted
}

// The agent asks for framing version 2 and falls back to version 1 with a hub that
// predates it; either way a stream carries data both ways.
func TestMuxNegotiatesTheFramingVersion(t *testing.T) {
	for _, v1Only := range []bool{false, true} {
		a := &Agent{log: slog.New(slog.DiscardHandler), exposed: map[string]Expose{}}
		conn, accepted := muxHub(t, v1Only)
		m := a.negotiateMux(conn, sshext.Ended(conn))
		if m == nil {
			t.Fatalf("v1Only=%v: no multiplexed channel", v1Only)
		}
		want := sshext.MuxPlain + sshext.MuxV2
		if v1Only {
			want = sshext.MuxPlain
		}
		if got := <-accepted; got != want {
			t.Fatalf("v1Only=%v: the hub accepted mode %q, want %q", v1Only, got, want)
		}
		st, err := m.Open(zmux.Target{Kind: zmux.Direct, Host: "echo", Port: 1})
		if err != nil {
			t.Fatal(err)
		}
		// More than version 1's window: with mismatched framing the session would fail.
		msg := strings.Repeat("x", 3*zmux.Window)
		go func() { io.WriteString(st, msg); st.CloseWrite() }()
		got, err := io.ReadAll(st)
		if err != nil || string(got) != msg {
			t.Fatalf("v1Only=%v: echo of %d bytes: %d bytes, %v", v1Only, len(msg), len(got), err)
		}
	}
}
