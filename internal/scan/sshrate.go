package scan

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// DHEat (CVE-2002-20001): a key exchange costs the server a Diffie-Hellman computation
// and a signature before anyone has authenticated, so a client that opens connections
// only to start key exchanges spends the server's CPU at little cost of its own. A
// server that throttles unauthenticated connections per source (OpenSSH's
// PerSourcePenalties, MaxStartups; the hub's per-source caps) holds the rate down.
const (
	// kexRateLimit is the rate of completed unauthenticated key exchanges from one
	// source above which the scan reports the server open to DHEat; ssh-audit's --dheat
	// test uses the same order of magnitude.
	kexRateLimit = 20.0
	kexRateFor   = 3 * time.Second
	kexRateConns = 8
)

// kexRate completes as many key exchanges as it can for kexRateFor over kexRateConns
// connections at a time, each stopped once the server has signed (no login is tried),
// and returns how many completed a second and how many were refused or cut.
func kexRate(ctx context.Context, addr string, o *Options) (perSecond float64, refused int64) {
	ctx, cancel := context.WithTimeout(ctx, kexRateFor)
	defer cancel()
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range kexRateConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := oneKex(ctx, addr, o); err == nil {
					done.Add(1)
				} else if ctx.Err() == nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), failed.Load()
}

// oneKex runs one key exchange to the server's signature.
func oneKex(ctx context.Context, addr string, o *Options) error {
	c, err := o.dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	signed := false
	cfg := &ssh.ClientConfig{User: "iotsafe-scan", ClientVersion: "SSH-2.0-iotsafe_scan",
		HostKeyCallback: func(string, net.Addr, ssh.PublicKey) error { signed = true; return errGotHostKey }}
	_, _, _, err = ssh.NewClientConn(c, addr, cfg)
	if signed {
		return nil
	}
	if err == nil {
		err = errors.New("no key exchange")
	}
	return err
}

// scanKexRate measures and adds the DHEat finding.
func scanKexRate(ctx context.Context, r *Report, addr string, o *Options) {
	rate, refused := kexRate(ctx, addr, o)
	addKexRate(r, rate, refused)
}

// addKexRate rates a measured rate of unauthenticated key exchanges.
func addKexRate(r *Report, rate float64, refused int64) {
	switch {
	case rate > kexRateLimit:
		r.add("kex", Weak, "DHEat (CVE-2002-20001): %.0f unauthenticated key exchanges a second completed from one source (%d connections at a time, %d refused): throttle unauthenticated connections per source", rate, kexRateConns, refused)
	default:
		r.add("kex", Good, "unauthenticated key exchanges throttled: %.1f a second from one source (%d refused or cut)", rate, refused)
	}
}

// postQuantum reports whether a key exchange is a post-quantum hybrid.
func postQuantum(kex string) bool {
	return strings.HasPrefix(kex, "mlkem") || strings.HasPrefix(kex, "sntrup") || strings.Contains(kex, "kyber")
}
