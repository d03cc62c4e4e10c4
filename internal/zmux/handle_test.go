package zmux

import (
	"errors"
	"io"
	"testing"
)

// TestHandleAndEnded: with Options.Handle the peer's streams are served without an
// Accept loop, many requests in a row (the writer stops between them and starts again),
// and Ended is called once, after the session ended, with the reason in Err.
func TestHandleAndEnded(t *testing.T) {
	for _, compress := range []bool{false, true} {
		a, b := tcpPair(t)
		ended := make(chan *Session, 2)
		hub := New(b, Options{Compress: compress, Version2: true, Ended: func(s *Session) { ended <- s }})
		dev := New(a, Options{Device: true, Compress: compress, Version2: true, Handle: func(st *Stream) {
			if st.Target().Host != "svc" {
				st.Reset("unknown alias")
				return
			}
			go func() {
				io.Copy(st, st)
				st.CloseWrite()
			}()
		}})
		if _, err := dev.Accept(); err == nil {
			t.Fatal("Accept on a session with Handle: want an error")
		}
		for i := range 20 {
			st, err := hub.Open(Target{Kind: Forwarded, Host: "svc"})
			if err != nil {
				t.Fatal(err)
			}
			msg := []byte("reading " + string(rune('a'+i)))
			if _, err := st.Write(msg); err != nil {
				t.Fatal(err)
			}
			st.CloseWrite()
			got, err := io.ReadAll(st)
			if err != nil || string(got) != string(msg) {
				t.Fatalf("request %d: got %q, %v", i, got, err)
			}
		}
		refused, _ := hub.Open(Target{Kind: Forwarded, Host: "other"})
		var reset *ResetError
		if _, err := io.ReadAll(refused); !errors.As(err, &reset) || reset.Reason != "unknown alias" {
			t.Fatalf("stream refused by Handle: got %v", err)
		}
		dev.Close()
		if s := <-ended; s != hub || s.Err() == nil {
			t.Fatalf("Ended: got session %p err %v, want the hub's session with a reason", s, s.Err())
		}
		hub.Close()
		select {
		case <-ended:
			t.Fatal("Ended called twice")
		default:
		}
	}
}
