package tlsbench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// Implementations and modes of the connection-time experiment.
var (
	Impls = []string{"go", "go-tls12", "openssl", "wolfssl", "pion", "pion+cid", "wolfssl-dtls"}
	// full_mlkem is a full handshake with the hybrid X25519MLKEM768 key share (Go's
	// default first choice), the others X25519.
	Modes = []string{"full", "resume", "psk_ke", "psk_dhe_ke", "full_mlkem"}
)

// unsupported says why an implementation cannot run a mode (what each library lacks).
var unsupported = map[string]string{
	"go psk_ke":               "Go's crypto/tls has no external PSK",
	"go psk_dhe_ke":           "Go's crypto/tls has no external PSK",
	"go-tls12 psk_ke":         "Go's crypto/tls has no external PSK",
	"go-tls12 psk_dhe_ke":     "Go's crypto/tls has no external PSK",
	"go-tls12 full_mlkem":     "TLS 1.2 has no hybrid post-quantum key exchange",
	"openssl full_mlkem":      "OpenSSL 3.0 has no ML-KEM",
	"wolfssl full_mlkem":      "Debian's wolfSSL 5.5.4 has no ML-KEM",
	"pion full_mlkem":         "DTLS 1.2 has no hybrid post-quantum key exchange",
	"pion+cid full_mlkem":     "DTLS 1.2 has no hybrid post-quantum key exchange",
	"wolfssl-dtls full_mlkem": "DTLS 1.2 has no hybrid post-quantum key exchange",
}

// tls13Only says whether impl takes part in the TLS 1.3 experiments (suites x groups,
// payload): not the DTLS 1.2 implementations, nor Go's TLS 1.2.
func tls13Only(impl string) bool {
	return impl == "go" || impl == "openssl" || impl == "wolfssl"
}

// Options of `iotsafe bench tls`.
type Options struct {
	K     []int    // subsequent connections per run; default 10, 100, 250, 500, 1000
	Impls []string // default go, openssl, wolfssl (TLS 1.3), pion, pion+cid, wolfssl-dtls (DTLS 1.2)
	Modes []string // default every mode
	Reps  int      // runs per point, median reported; default 3
	// Window is each suites x groups cell's time (figs. 3, 4; the paper: 15 s); default
	// 15s (150ms with Quick). NoSuites skips that experiment.
	Window   time.Duration
	NoSuites bool
	// NoPrimitives skips fig. 2 (each primitive 1 s; 30 ms with Quick).
	NoPrimitives bool
	// NoPayload skips fig. 6 (each payload size for Window).
	NoPayload bool
	// Link runs fig. 5 across the lab's emulated link (root; the zero Profile is
	// loopback): every implementation, the C helpers through `ip netns exec`, K = 10 and
	// one repetition unless given; the other experiments are loopback's.
	Link  linkemu.Profile
	Quick bool
	// Progress reports the runs.
	Progress *lab.Progress
}

func (o *Options) defaults() error {
	if o.Link.Name != "" {
		if len(o.K) == 0 {
			o.K = []int{10}
		}
		if o.Reps == 0 {
			o.Reps = 1
		}
		o.NoSuites, o.NoPrimitives, o.NoPayload = true, true, true
	}
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
	if o.Window <= 0 {
		o.Window = 15 * time.Second
		if o.Quick {
			o.Window = 150 * time.Millisecond
		}
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
	Resumed        int    // connections that resumed a session (or used the PSK)
	Sent, Received int64  // bytes on the client's sockets
	Suite          string // the TLS 1.3 suite negotiated (Go's runs)
	Link           lab.LinkCost
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
	// Cells are the suites x groups runs; "impl suite group" cells no implementation
	// could run are in Skipped too.
	Cells []Cell
	// Primitives are fig. 2's measurements.
	Primitives []Primitive
	// Payloads are fig. 6's runs.
	Payloads []Payload
}

// PayloadSizes are fig. 6's message sizes.
var PayloadSizes = []int{100, 1000, 2500, 5000, 10000}

// Payload is one implementation and message size on one connection: messages sent and
// echoed back, one after the other, for the window.
type Payload struct {
	Impl string
	Size int
	Sample
}

// The TLS 1.3 suites and groups of figs. 3 and 4.
var (
	Suites = []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
	Groups = []string{"X25519", "P-256", "P-384", "P-521", "X25519MLKEM768"}
)

// goGroups are the groups by name, for Go's client.
var goGroups = map[string]tls.CurveID{"X25519": tls.X25519, "P-256": tls.CurveP256, "P-384": tls.CurveP384, "P-521": tls.CurveP521, "X25519MLKEM768": tls.X25519MLKEM768}

// Cell is one implementation x suite x group: full handshakes, one after the other, for
// the window.
type Cell struct {
	Impl, Suite, Group string
	Sample
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
	tlsImpls := 0
	for _, impl := range o.Impls {
		if tls13Only(impl) {
			tlsImpls++
		}
	}
	steps := len(o.Impls) * len(o.Modes) * len(o.K) * o.Reps
	if !o.NoSuites {
		steps += tlsImpls * len(Suites) * len(Groups)
	}
	if !o.NoPrimitives {
		steps += 3
	}
	if !o.NoPayload {
		steps += tlsImpls * len(PayloadSizes)
	}
	p.Start(steps)
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
	bins := map[string]string{} // the C helpers built, by implementation
	var env netEnv
	if o.Link.Name != "" {
		if env.pair, err = lab.NewLinkPair(o.Link, "tls", nil); err != nil {
			return res, err
		}
		defer env.pair.Close()
	}
	for _, impl := range o.Impls {
		var run func(mode string, k int) (Sample, error)
		var window func(suite, group string) (Sample, error) // nil: no suites x groups (DTLS)
		switch impl {
		case "pion", "pion+cid":
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return res, err
			}
			cid := impl == "pion+cid"
			ln, err := dtlsServer(env, cert, key, cid)
			if err != nil {
				return res, err
			}
			defer ln.Close()
			run = func(mode string, k int) (Sample, error) {
				return dtlsClient(ctx, env, ln.Addr(), k, mode, key, cid, trust)
			}
		case "wolfssl-dtls":
			bin := bins["wolfssl"]
			if bin == "" {
				if bin, err = buildHelper(ctx, dir, "wolfssl"); err != nil {
					return res, err
				}
			}
			srv, port, err := startHelper(ctx, env, bin, "dtls-server", certFile, keyFile, pskHex)
			if err != nil {
				return res, err
			}
			defer srv.Stop()
			run = func(mode string, k int) (Sample, error) {
				return runHelper(ctx, env, bin, "dtls-client", env.serverIP().String(), strconv.Itoa(port), strconv.Itoa(k), mode, pskHex, certFile)
			}
		case "go-tls12":
			// The hub's listeners take TLS 1.2 too: its resumption is an abbreviated
			// handshake (no key exchange), where TLS 1.3's keeps the ECDHE.
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return res, err
			}
			ln, err := goServer(env, cert, tls.VersionTLS12)
			if err != nil {
				return res, err
			}
			defer ln.Close()
			run = func(mode string, k int) (Sample, error) {
				return goClient(ctx, env, ln.Addr().String(), tls.VersionTLS12, k, mode == "resume", tls.X25519, trust, 0)
			}
		case "go":
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return res, err
			}
			ln, err := goServer(env, cert, tls.VersionTLS13)
			if err != nil {
				return res, err
			}
			defer ln.Close()
			run = func(mode string, k int) (Sample, error) {
				group := tls.X25519
				if mode == "full_mlkem" {
					group = tls.X25519MLKEM768
				}
				return goClient(ctx, env, ln.Addr().String(), tls.VersionTLS13, k, mode == "resume", group, trust, 0)
			}
			window = func(suite, group string) (Sample, error) {
				if suite != Suites[0] {
					return Sample{}, errUnsupported("Go's crypto/tls chooses its TLS 1.3 suite itself (AES-128-GCM first on AES hardware): a client cannot ask for " + suite)
				}
				s, err := goClient(ctx, env, ln.Addr().String(), tls.VersionTLS13, 1<<30, false, goGroups[group], trust, o.Window)
				if err == nil && s.Suite != suite {
					err = fmt.Errorf("the Go client negotiated %s, not %s", s.Suite, suite)
				}
				return s, err
			}
		default: // a C helper
			bin, err := buildHelper(ctx, dir, impl)
			if err != nil {
				return res, err
			}
			bins[impl] = bin
			srv, port, err := startHelper(ctx, env, bin, "server", certFile, keyFile, pskHex)
			if err != nil {
				return res, err
			}
			defer srv.Stop()
			run = func(mode string, k int) (Sample, error) {
				return helperClient(ctx, env, bin, port, k, mode, "X25519", pskHex, certFile, "", 0)
			}
			window = func(suite, group string) (Sample, error) {
				return helperClient(ctx, env, bin, port, 1<<30, "full", group, pskHex, certFile, suite, o.Window)
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
					l0 := env.pair.Cost()
					s, err := run(mode, k)
					s.Link = env.pair.Cost().Minus(l0)
					if err != nil {
						return res, fmt.Errorf("%s %s K=%d: %w", impl, mode, k, err)
					}
					if mode != "full" && mode != "full_mlkem" && s.Resumed < k-1 {
						return res, fmt.Errorf("%s %s K=%d: only %d of %d connections resumed or used the PSK: the run would measure full handshakes", impl, mode, k, s.Resumed, k)
					}
					res.Runs = append(res.Runs, Point{Impl: impl, Mode: mode, Rep: rep, Sample: s})
				}
			}
		}
		if window != nil && !o.NoSuites {
			if err := suitesGroups(&res, p, impl, window); err != nil {
				return res, err
			}
		}
	}
	if !o.NoPayload {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return res, err
		}
		if err := payloads(ctx, &res, p, o, cert, certFile, keyFile, pskHex, trust, bins); err != nil {
			return res, err
		}
	}
	if !o.NoPrimitives {
		if err := primitives(ctx, &res, p, o, dir, bins); err != nil {
			return res, err
		}
	}
	p.Done()
	return res, nil
}

// payloads measures fig. 6 with each TLS implementation: its own client against its own
// echo server, one connection.
func payloads(ctx context.Context, res *Result, p *lab.Progress, o Options, cert tls.Certificate, certFile, keyFile, pskHex string, trust *tls.Config, bins map[string]string) error {
	for _, impl := range o.Impls {
		var run func(size int) (Sample, error)
		switch {
		case impl == "go":
			ln, err := goEchoServer(cert)
			if err != nil {
				return err
			}
			defer ln.Close()
			run = func(size int) (Sample, error) { return goPayload(ctx, ln.Addr().String(), size, trust, o.Window) }
		case bins[impl] != "":
			srv, port, err := startHelper(ctx, netEnv{}, bins[impl], "echo", certFile, keyFile, pskHex)
			if err != nil {
				return err
			}
			defer srv.Stop()
			bin := bins[impl]
			run = func(size int) (Sample, error) { return helperPayload(ctx, bin, port, size, o.Window, certFile) }
		default:
			continue // DTLS, or a helper not built (a link run)
		}
		for _, size := range PayloadSizes {
			p.Step(fmt.Sprintf("%s: %d-byte messages for the window", impl, size))
			s, err := run(size)
			if err != nil {
				return fmt.Errorf("%s payload %d: %w", impl, size, err)
			}
			res.Payloads = append(res.Payloads, Payload{Impl: impl, Size: size, Sample: s})
		}
	}
	return nil
}

// primitives measures fig. 2 with Go, and with OpenSSL and wolfCrypt when they are among
// the implementations.
func primitives(ctx context.Context, res *Result, p *lab.Progress, o Options, dir string, bins map[string]string) error {
	d := time.Second
	if o.Quick {
		d = 30 * time.Millisecond
	}
	p.Step("Go's primitives")
	g, err := goPrimitives(d)
	if err != nil {
		return err
	}
	res.Primitives = append(res.Primitives, g...)
	p.Step("OpenSSL's primitives (openssl speed)")
	if slices.Contains(o.Impls, "openssl") {
		ossl, err := opensslPrimitives(ctx, 1, o.Quick)
		if err != nil {
			return err
		}
		res.Primitives = append(res.Primitives, ossl...)
		res.Skipped["openssl ML-KEM-768"] = "OpenSSL 3.0 has no ML-KEM"
	}
	p.Step("wolfCrypt's primitives (the helper's speed loop)")
	if slices.Contains(o.Impls, "wolfssl") {
		bin := bins["wolfssl"]
		if bin == "" {
			var err error
			if bin, err = buildHelper(ctx, dir, "wolfssl"); err != nil {
				return err
			}
		}
		w, err := wolfCryptPrimitives(ctx, bin, d)
		if err != nil {
			return err
		}
		res.Primitives = append(res.Primitives, w...)
		res.Skipped["wolfssl ML-KEM-768"] = "Debian's wolfSSL 5.5.4 has no ML-KEM"
	}
	return nil
}

// suitesGroups runs every suite x group with one implementation (figs. 3, 4).
func suitesGroups(res *Result, p *lab.Progress, impl string, window func(suite, group string) (Sample, error)) error {
	for _, suite := range Suites {
		for _, group := range Groups {
			p.Step(fmt.Sprintf("%s %s %s for the window", impl, suite, group))
			s, err := window(suite, group)
			var unsup errUnsupported
			switch {
			case errors.As(err, &unsup):
				res.Skipped[impl+" "+suite+" "+group] = string(unsup)
			case err != nil:
				return fmt.Errorf("%s %s %s: %w", impl, suite, group, err)
			default:
				res.Cells = append(res.Cells, Cell{Impl: impl, Suite: suite, Group: group, Sample: s})
			}
		}
	}
	return nil
}
