//go:build !race

// Under the race detector the registry (SQLite compiled to Go) is about twenty times
// slower and this test takes a minute; scripts/test.sh runs it without -race.

package sshd

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// A fleet behind one NAT address reconnecting at once after a hub restart: with the
// default per-source limits every device gets in, none is refused.
func TestFleetBehindOneAddressAllGetIn(t *testing.T) {
	const n = 1000
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) {
		// The default startups and queue; a longer wait than the default 10 s, so a slow
		// test machine cannot turn this into a timing test (here the last device waits
		// about 5 s).
		c.PerSource.MaxWait = time.Minute
	})
	keys := make([]ssh.Signer, n)
	keys[0] = f.device
	for i := 1; i < n; i++ {
		keys[i] = signer(t)
		if _, err := f.reg.AddDevice(context.Background(), fmt.Sprintf("dev%d", i+1), "p", keys[i].PublicKey()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	conns := make(chan ssh.Conn, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				errs <- err
				return
			}
			conn, err := handshake(c, f.addr, fmt.Sprintf("dev%d", i+1), keys[i], f.host)
			if err != nil {
				errs <- fmt.Errorf("dev%d: %w", i+1, err)
				return
			}
			conns <- conn
		}()
	}
	wg.Wait()
	close(errs)
	close(conns)
	for c := range conns {
		c.Close()
	}
	failed := 0
	for err := range errs {
		if failed++; failed <= 5 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d devices behind one address did not get in", failed, n)
	}
}
