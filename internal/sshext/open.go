package sshext

import (
	"errors"

	"golang.org/x/crypto/ssh"
)

// ErrConnectionEnded means the connection ended while a channel open waited for the
// peer's answer.
var ErrConnectionEnded = errors.New("ssh: the connection ended before the channel was answered")

// OpenChannel is conn.OpenChannel that also gives up once ended is closed (the
// connection has ended). x/crypto's OpenChannel registers the channel, sends the open
// and waits for the answer; a channel registered just after the connection's reader
// ended is neither answered nor failed, and its caller would wait for ever. Seen in a
// test whose opens raced the peer's close; in the hub it would hold a local client's
// connection and a slot of the forward budget, in an agent or a gateway the session
// that never reconnects. The abandoned open's goroutine stays blocked in x/crypto: one
// per such race, not one per open.
func OpenChannel(conn ssh.Conn, ended <-chan struct{}, kind string, extra []byte) (ssh.Channel, <-chan *ssh.Request, error) {
	select {
	case <-ended:
		return nil, nil, ErrConnectionEnded
	default:
	}
	type opened struct {
		ch   ssh.Channel
		reqs <-chan *ssh.Request
		err  error
	}
	res := make(chan opened, 1)
	go func() {
		ch, reqs, err := conn.OpenChannel(kind, extra)
		res <- opened{ch, reqs, err}
	}()
	select {
	case r := <-res:
		return r.ch, r.reqs, r.err
	case <-ended:
		go func() { // an answer that comes after all is closed unused
			if r := <-res; r.err == nil {
				r.ch.Close()
			}
		}()
		return nil, nil, ErrConnectionEnded
	}
}

// Ended returns a channel closed once conn has ended (its Wait returned), for
// OpenChannel.
func Ended(conn ssh.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		conn.Wait()
		close(done)
	}()
	return done
}
