package tlsbench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"slices"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Implementations and modes of the connection-time experiment.
var (
	Impls = []string{"go", "openssl", "wolfssl", "pion", "pion+cid"}
	Modes = []string{"full", "resume", "psk_ke", "psk_dhe_ke"}
)

// unsupported says why an implementation cannot run a mode (FACTS.md).
var unsupported = map[string]string{
	"go psk_ke":     "Go's crypto/tls has no external PSK",
	"go psk_dhe_ke": "Go's crypto/tls has no external PSK",
}

// Options of `iotsafe bench tls`.
type Options struct {
	K     []int    // subsequent connections per run; default 10, 100, 250, 500, 1000
	Impls []string // default go, openssl, wolfssl (TLS 1.3), pion, pion+cid (DTLS 1.2)
	Modes []string // default every mode
	Reps  int      // runs per point, median reported; default 3
	Quick bool
	// Progress reports the runs.
	Progress *lab.Progress
}

func (o *Options) defaults() error {
	if len(o.K) == 0 {
		o.K = []int{10, 100, 250, 500, 1000}
		if o.Quick {
			o.K = []int{5, 20}
		}
	}
	if len(o.Impls) == 0 {
		o.Impls = Impls
	}
	if len(o.Modes) == 0 {
		o.Modes = Modes
	}
	if o.Reps == 0 {
		o.Reps = 3
		if o.Quick {
			o.Reps = 1
		}
	}
	for _, k := range o.K {
		if k < 1 || k > 100_000 {
			return fmt.Errorf("--k: %d is out of range 1..100000", k)
		}
	}
	for _, i := range o.Impls {
		if !slices.Contains(Impls, i) {
			return fmt.Errorf("--impls: unknown %q: use %v", i, Impls)
		}
	}
	for _, m := range o.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("--modes: unknown %q: use %v", m, Modes)
		}
	}
	if o.Reps < 0 {
		return fmt.Errorf("--reps must not be negative")
	}
	return nil
}

// Sample is one run: K connections one after the other.
type Sample struct {
	K              int
	Seconds        float64
	Resumed        int   // connections that resumed a session (or used the PSK)
	Sent, Received int64 // bytes on the client's sockets
}

// Point is a sample with its implementation, mode and repetition.
type Point struct {
	Impl, Mode string
	Rep        int
	Sample
}

// Result is the whole experiment.
type Result struct {
	Options Options
	Runs    []Point
	Skipped map[string]string // "impl mode" -> why
}

// Measure runs every implementation x mode x K.
func Measure(ctx context.Context, b *lab.Bench, o Options) (Result, error) {
	res := Result{Options: o, Skipped: map[string]string{}}
	if err := o.defaults(); err != nil {
		return res, err
	}
	res.Options = o
	p := o.Progress
	if p == nil {
		p = &lab.Progress{W: io.Discard}
	}
	p.Start(len(o.Impls) * len(o.Modes) * len(o.K) * o.Reps)
	dir, err := b.Scratch("tls")
	if err != nil {
		return res, err
	}
	certFile, keyFile, trust, err := lab.WriteServerCert(dir, "tls", false)
	if err != nil {
		return res, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	pskHex := hex.EncodeToString(key)
	for _, impl := range o.Impls {
		var run func(mode string, k int) (Sample, error)
		switch impl {
		case "pion", "pion+cid":
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return res, err
			}
			cid := impl == "pion+cid"
			ln, err := dtlsServer(cert, key, cid)
			if err != nil {
				return res, err
			}
			defer ln.Close()
			run = func(mode string, k int) (Sample, error) {
				return dtlsClient(ctx, ln.Addr(), k, mode, key, cid, trust)
			}
		case "go":
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return res, err
			}
			ln, err := goServer(cert)
			if err != nil {
				return res, err
			}
			defer ln.Close()
			run = func(mode string, k int) (Sample, error) {
				return goClient(ctx, ln.Addr().String(), k, mode == "resume", tls.X25519, trust)
			}
		default: // a C helper
			bin, err := buildHelper(ctx, dir, impl)
			if err != nil {
				return res, err
			}
			srv, port, err := helperServer(ctx, bin, certFile, keyFile, pskHex)
			if err != nil {
				return res, err
			}
			defer srv.Stop()
			run = func(mode string, k int) (Sample, error) {
				return helperClient(ctx, bin, port, k, mode, "X25519", pskHex, certFile)
			}
		}
		for _, mode := range o.Modes {
			if why, ok := unsupported[impl+" "+mode]; ok {
				res.Skipped[impl+" "+mode] = why
				for range len(o.K) * o.Reps {
					p.Step(fmt.Sprintf("%s %s: not supported", impl, mode))
				}
				continue
			}
			// Repetitions outermost: a drift of the machine spreads over every K.
			for rep := range o.Reps {
				for _, k := range o.K {
					p.Step(fmt.Sprintf("rep %d/%d: %s %s, %d connections", rep+1, o.Reps, impl, mode, k))
					s, err := run(mode, k)
					if err != nil {
						return res, fmt.Errorf("%s %s K=%d: %w", impl, mode, k, err)
					}
					if mode != "full" && s.Resumed < k-1 {
						return res, fmt.Errorf("%s %s K=%d: only %d of %d connections resumed or used the PSK: the run would measure full handshakes", impl, mode, k, s.Resumed, k)
					}
					res.Runs = append(res.Runs, Point{Impl: impl, Mode: mode, Rep: rep, Sample: s})
				}
			}
		}
	}
	p.Done()
	return res, nil
}
