package sshtest

import (
	"net"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// SilentServer completes SSH handshakes (any client, no authentication) and then
// answers nothing: no channel open, no global request, as a stuck server would. No
// real server can be made to behave so on demand, hence this stand-in on a real
// x/crypto server. It returns its address and host key, and a channel that receives
// once per session it accepted (up to 16 waiting).
func SilentServer(t testing.TB) (addr string, hostKey ssh.PublicKey, sessions <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	host := Signer(t)
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(host)
	got := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				if _, _, _, err := ssh.NewServerConn(c, cfg); err != nil {
					return
				}
				select {
				case got <- struct{}{}:
				default:
				}
			}()
		}
	}()
	return ln.Addr().String(), host.PublicKey(), got
}
