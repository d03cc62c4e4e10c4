package wssecbench

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// Cases are the paper's three messages: a 5-byte string, a 50-byte string, and an XML
// structure of ten 5-byte strings.
var Cases = []int{1, 2, 3}

// payload is case c's Body content.
func payload(c int) []byte {
	switch c {
	case 1:
		return soap.Notification("case1", "abcde", nil)
	case 2:
		return soap.Notification("case2", strings.Repeat("0123456789", 5), nil)
	}
	var ps [][2]string
	for i := range 10 {
		ps = append(ps, [2]string{fmt.Sprintf("s%d", i), "abcde"})
	}
	return soap.Notification("case3", "", ps)
}

// Variants: the unsecured SOAP baseline, SOAP over TLS (the paper's TLS rows), and the two
// compact forms with each suite.
func Variants() []string {
	v := []string{"soap", "tls1.2-aes128-cbc-sha", "tls1.2-aes128-gcm", "tls1.3-aes128-gcm"}
	for _, f := range []wssec.Format{wssec.CSec, wssec.SecRec} {
		for _, s := range wssec.SuiteNames() {
			v = append(v, string(f)+"-"+s)
		}
	}
	return v
}

// Options of `iotsafe bench wssec`.
type Options struct {
	// Link is an emulated link between device and server (root; lab.NewLinkPair); the
	// zero Profile means loopback.
	Link     linkemu.Profile
	Variants []string // default: every variant
	Cases    []int    // default 1, 2, 3
	Requests int      // round trips per variant and case; default 1000 (20 with Quick)
	Quick    bool
	// Levels and Chunks are the deflate sweep (table VI): levels 0-9, chunk sizes 1024,
	// 2048, 4096 by default; Requests/4 round trips per cell.
	Levels, Chunks []int
	NoDeflate      bool
	Progress       *lab.Progress
}

func (o *Options) defaults() error {
	if len(o.Variants) == 0 {
		o.Variants = Variants()
		if o.Quick {
			o.Variants = []string{"soap", "tls1.3-aes128-gcm", "csec-aes128-gcm", "secrec-aes128-gcm", "secrec-rc4-sha1"}
		}
	}
	if len(o.Cases) == 0 {
		o.Cases = Cases
	}
	if o.Requests == 0 {
		switch {
		case o.Quick:
			o.Requests = 20
		case o.Link.Name != "":
			o.Requests = 100 // tens of ms each over 802.15.4
		default:
			o.Requests = 1000
		}
	}
	if len(o.Levels) == 0 {
		o.Levels = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		if o.Quick {
			o.Levels = []int{0, 9}
		}
	}
	if len(o.Chunks) == 0 {
		o.Chunks = []int{1024, 2048, 4096}
		if o.Quick {
			o.Chunks = []int{1024}
		}
	}
	all := Variants()
	for _, v := range o.Variants {
		if !slices.Contains(all, v) {
			return fmt.Errorf("--variants: unknown %q: use %s", v, strings.Join(all, ", "))
		}
	}
	for _, c := range o.Cases {
		if !slices.Contains(Cases, c) {
			return fmt.Errorf("--cases: %d: the paper's cases are 1, 2 and 3", c)
		}
	}
	for _, l := range o.Levels {
		if l < 0 || l > 9 {
			return fmt.Errorf("--levels: %d: deflate levels are 0-9", l)
		}
	}
	for _, c := range o.Chunks {
		if c < 64 || c > 1<<20 {
			return fmt.Errorf("--chunks: %d: want 64 bytes to 1 MiB", c)
		}
	}
	if o.Requests < 1 {
		return errors.New("--requests must be at least 1")
	}
	return nil
}

// Row is one variant and case: sizes and round trips.
type Row struct {
	Variant string
	Case    int
	// EnvelopeTX/RX are the SOAP envelopes (request, answer); BodyTX/RX their Body
	// elements (table I, for the unsecured variant); WireTX/RX the TCP payload of one
	// request and one answer on the client's socket: HTTP headers and body, inside TLS
	// records for the TLS variants.
	EnvelopeTX, EnvelopeRX, BodyTX, BodyRX int
	WireTX, WireRX                         float64
	RTTs                                   []float64 // ms, every round trip
	// Link is what the measured exchanges cost on the emulated link (zero on loopback).
	Link lab.LinkCost
}

// DeflateRow is one cell of the compression sweep (table VI).
type DeflateRow struct {
	Variant       string
	Level, Chunk  int
	RequestBytes  float64 // HTTP request on the wire (compressed body)
	RTTs          []float64
	EnvelopeBytes int // the uncompressed envelope
}

// Result is the whole experiment.
type Result struct {
	Options Options
	Rows    []Row
	Deflate []DeflateRow
}

// counter counts bytes on the client's connections.
type counter struct{ sent, recvd atomic.Int64 }

type countingConn struct {
	net.Conn
	c *counter
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.c.recvd.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.c.sent.Add(int64(n))
	return n, err
}

// client is one variant's client: one kept-alive connection, counted.
type client struct {
	variant string
	hc      *http.Client
	url     string
	cnt     *counter
	format  wssec.Format // "" for soap and TLS
	suite   *wssec.Suite
	key     wssec.Key
	recv    *wssec.Receiver
	ring    *wssec.Keyring
}

// dialer opens the client's connection: on loopback, or from the device's namespace of an
// emulated link.
type dialer func(ctx context.Context, addr string) (net.Conn, error)

func loopbackDial(ctx context.Context, addr string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
}

func newClient(variant string, srv *server, dial dialer) (*client, error) {
	c := &client{variant: variant, cnt: &counter{}, key: srv.key}
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			conn, err := dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn, c.cnt}, nil
		}}
	c.hc = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	c.url = "http://" + srv.plain.Addr().String()
	switch {
	case variant == "soap":
		c.url += "/plain"
	case strings.HasPrefix(variant, "tls"):
		conf := srv.trust.Clone()
		switch variant {
		case "tls1.2-aes128-cbc-sha":
			conf.MinVersion, conf.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			conf.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}
		case "tls1.2-aes128-gcm":
			conf.MinVersion, conf.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			conf.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
		default: // TLS 1.3 negotiates AES-128-GCM first on hardware with AES
			conf.MinVersion = tls.VersionTLS13
		}
		tr.TLSClientConfig = conf
		c.url = "https://" + srv.tls.Addr().String() + "/plain"
	default:
		f, name, _ := strings.Cut(variant, "-")
		s, err := wssec.SuiteByName(name)
		if err != nil {
			return nil, err
		}
		c.format, c.suite, c.url = wssec.Format(f), s, c.url+"/secured"
		c.ring = wssec.NewKeyring(0)
		c.recv = &wssec.Receiver{Policy: wssec.Only(s), Keyring: c.ring, Key: func(id string) (wssec.Key, bool) { return c.key, id == c.key.ID }}
	}
	return c, nil
}

// build is the request envelope for case cs.
func (c *client) build(cs int) ([]byte, string, error) {
	m := wssec.Message{To: c.url, Action: soap.ActionNotify, MessageID: wssec.NewMessageID(), Created: time.Now(), Body: payload(cs)}
	if c.format == "" {
		b, err := wssec.Plain(m)
		return b, m.MessageID, err
	}
	b, err := c.ring.Seal(c.format, m, c.suite, c.key)
	return b, m.MessageID, err
}

// roundTrip sends one message of case cs (its body deflated at level with the chunk size
// when level >= 0) and checks the answer; the time covers sealing, the exchange and
// opening the answer, as the paper's client measured it.
func (c *client) roundTrip(ctx context.Context, cs, level, chunk int) (rtt time.Duration, env, answer []byte, err error) {
	start := time.Now()
	env, id, err := c.build(cs)
	if err != nil {
		return 0, nil, nil, err
	}
	body := env
	if level >= 0 {
		body = deflate(env, level, chunk)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", soap.ContentType)
	if level >= 0 {
		req.Header.Set("Content-Encoding", "deflate")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	answer, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, nil, fmt.Errorf("%s: HTTP %d: %.200s", c.variant, resp.StatusCode, answer)
	}
	if c.format == "" {
		m, _, err := wssec.ReadPlain(answer, wssec.Limits{})
		if err != nil || m.RelatesTo != id {
			return 0, nil, nil, fmt.Errorf("%s: answer: %v", c.variant, err)
		}
	} else {
		o, err := c.recv.Open(answer)
		if err != nil || o.RelatesTo != id {
			return 0, nil, nil, fmt.Errorf("%s: answer does not verify: %v", c.variant, err)
		}
	}
	return time.Since(start), env, answer, nil
}

// deflate compresses b at level, flushing every chunk bytes of input: Go's compress/flate
// has no buffer-size parameter, so the chunk size is the most input the compressor holds
// before it must emit (zlib's chunk loop, as the paper's buffer).
func deflate(b []byte, level, chunk int) []byte {
	var out bytes.Buffer
	w, _ := flate.NewWriter(&out, level)
	for len(b) > 0 {
		n := min(chunk, len(b))
		w.Write(b[:n])
		b = b[n:]
		if len(b) > 0 {
			w.Flush()
		}
	}
	w.Close()
	return out.Bytes()
}

// Measure runs every variant and case, then the deflate sweep.
func Measure(ctx context.Context, b *lab.Bench, o Options) (Result, error) {
	res := Result{Options: o}
	if err := o.defaults(); err != nil {
		return res, err
	}
	res.Options = o
	p := o.Progress
	if p == nil {
		p = &lab.Progress{W: io.Discard}
	}
	deflateVariants := []string{"secrec-rc4-sha1", "secrec-aes128-gcm"}
	// Progress every tenth of a case's round trips.
	every := max(1, o.Requests/10)
	steps := len(o.Cases) * (o.Requests / every)
	if !o.NoDeflate {
		steps += len(deflateVariants) * len(o.Levels) * len(o.Chunks)
	}
	p.Start(steps)
	dir, err := b.Scratch("wssec")
	if err != nil {
		return res, err
	}
	listen := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	dial := dialer(loopbackDial)
	var pair *lab.LinkPair
	if o.Link.Name != "" {
		// Client in the device's namespace, server in the gateway's, the emulated link
		// between: every byte pays its frames and airtime.
		if pair, err = lab.NewLinkPair(o.Link, "wssec", nil); err != nil {
			return res, err
		}
		defer pair.Close()
		listen = func() (ln net.Listener, err error) {
			err = linkemu.InNetns(pair.GW, func() error {
				ln, err = net.Listen("tcp", "["+lab.LinkGWAddr+"]:0")
				return err
			})
			return ln, err
		}
		in := pair.DialIn(pair.Dev)
		dial = func(_ context.Context, addr string) (net.Conn, error) { return in(addr) }
	}
	srv, err := startServer(dir, listen)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	clients := make([]*client, len(o.Variants))
	for i, v := range o.Variants {
		if clients[i], err = newClient(v, srv, dial); err != nil {
			return res, err
		}
		defer clients[i].hc.CloseIdleConnections()
	}
	for _, cs := range o.Cases {
		rows := make([]Row, len(clients))
		for i, c := range clients {
			rows[i] = Row{Variant: c.variant, Case: cs}
			// The paper's dummy request: the connection and any TLS session are set up
			// before the measured ones.
			if _, _, _, err := c.roundTrip(ctx, cs, -1, 0); err != nil {
				return res, err
			}
		}
		// One round trip per variant in turn, so the machine's moments of load fall on
		// every variant alike (the ratios are what the targets compare).
		for j := 0; j < o.Requests; j++ {
			for i, c := range clients {
				s0, r0 := c.cnt.sent.Load(), c.cnt.recvd.Load()
				l0 := pair.Cost()
				rtt, env, ans, err := c.roundTrip(ctx, cs, -1, 0)
				if err != nil {
					return res, err
				}
				rows[i].RTTs = append(rows[i].RTTs, float64(rtt.Microseconds())/1000)
				rows[i].WireTX += float64(c.cnt.sent.Load()-s0) / float64(o.Requests)
				rows[i].WireRX += float64(c.cnt.recvd.Load()-r0) / float64(o.Requests)
				rows[i].Link = rows[i].Link.Plus(pair.Cost().Minus(l0))
				if j == 0 {
					rows[i].EnvelopeTX, rows[i].EnvelopeRX = len(env), len(ans)
					if c.format == "" {
						rows[i].BodyTX, rows[i].BodyRX = wssec.BodySize(env), wssec.BodySize(ans)
					}
				}
			}
			if (j+1)%every == 0 && (j+1)/every <= o.Requests/every {
				p.Step(fmt.Sprintf("case %d, %d of %d round trips per variant", cs, j+1, o.Requests))
			}
		}
		res.Rows = append(res.Rows, rows...)
	}
	if o.NoDeflate {
		return res, nil
	}
	for _, v := range deflateVariants {
		c, err := newClient(v, srv, dial)
		if err != nil {
			return res, err
		}
		if _, _, _, err := c.roundTrip(ctx, 2, -1, 0); err != nil {
			return res, err
		}
		n := max(o.Requests/4, 5)
		for _, level := range o.Levels {
			for _, chunk := range o.Chunks {
				d := DeflateRow{Variant: v, Level: level, Chunk: chunk}
				s0 := c.cnt.sent.Load()
				for range n {
					rtt, env, _, err := c.roundTrip(ctx, 2, level, chunk)
					if err != nil {
						return res, err
					}
					d.RTTs = append(d.RTTs, float64(rtt.Microseconds())/1000)
					d.EnvelopeBytes = len(env)
				}
				d.RequestBytes = float64(c.cnt.sent.Load()-s0) / float64(n)
				res.Deflate = append(res.Deflate, d)
				p.Step(fmt.Sprintf("deflate %s level %d chunk %d", v, level, chunk))
			}
		}
		c.hc.CloseIdleConnections()
	}
	return res, nil
}
