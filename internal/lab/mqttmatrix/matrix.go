package mqttmatrix

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/mqttload"
	"github.com/iotsafe/iotsafe/internal/linkemu"
	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// The brokers and paths a run can compare.
const (
	Mosquitto = "mosquitto" // Debian's Mosquitto over TLS (OpenSSL)
	Hub       = "hub"       // the hub's broker over TLS (Go crypto/tls)
	Plain     = "plain"     // Mosquitto without TLS: the ceiling
	SSH       = "ssh"       // the hub's plain listener through the device's agent (SSH)
)

// Loopback is the link of a run without the emulator: client and broker on 127.0.0.1.
const Loopback = "loopback"

// Options of the matrix; empty lists mean the paper's full dimension.
type Options struct {
	Links   []string // loopback, ethernet, wifi, lte, 802154; default loopback
	Brokers []string // mosquitto, hub, plain, ssh; default all four
	TLS     []string // "1.2", "1.3"; default both
	Suites  []string // default PaperSuites12 and PaperSuites13
	QoS     []int    // default 0, 1, 2
	MQTT    []string // "3.1.1", "5"; default both
	// Clients x Messages per run (default the paper's 10 x 100), Payload bytes each
	// (default 100), Reps runs per cell (default 3; the median is reported).
	Clients, Messages, Payload, Reps int
	Quick                            bool
	// MosquittoNoDelay runs Mosquitto (over TLS and plain) with Nagle's algorithm off,
	// as the hub runs; its default leaves it on (lab.MosquittoOpts.NoDelay).
	MosquittoNoDelay bool
	Progress         *lab.Progress
}

func (o *Options) defaults() error {
	if o.Quick {
		def := func(v *[]string, d ...string) {
			if len(*v) == 0 {
				*v = d
			}
		}
		def(&o.Links, Loopback, "ethernet")
		def(&o.Suites, "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305", "DHE-RSA-AES128-GCM-SHA256", "TLS_AES_256_GCM_SHA384")
		if len(o.QoS) == 0 {
			o.QoS = []int{0, 2}
		}
		pick := func(v *int, q int) {
			if *v == 0 {
				*v = q
			}
		}
		pick(&o.Clients, 2)
		pick(&o.Messages, 5)
		pick(&o.Reps, 1)
	}
	if len(o.Links) == 0 {
		o.Links = []string{Loopback}
	}
	if len(o.Brokers) == 0 {
		o.Brokers = []string{Mosquitto, Hub, Plain, SSH}
	}
	if len(o.TLS) == 0 {
		o.TLS = []string{"1.2", "1.3"}
	}
	if len(o.Suites) == 0 {
		o.Suites = slices.Concat(PaperSuites12, PaperSuites13)
	}
	if len(o.QoS) == 0 {
		o.QoS = []int{0, 1, 2}
	}
	if len(o.MQTT) == 0 {
		o.MQTT = []string{"3.1.1", "5"}
	}
	for _, v := range []*int{&o.Clients, &o.Messages, &o.Payload, &o.Reps} {
		if *v < 0 {
			return fmt.Errorf("--clients, --messages, --payload and --reps must not be negative")
		}
	}
	if o.Clients == 0 {
		o.Clients = 10
	}
	if o.Messages == 0 {
		o.Messages = 100
	}
	if o.Payload == 0 {
		o.Payload = 100
	}
	if o.Reps == 0 {
		o.Reps = 3
	}
	for _, l := range o.Links {
		if l == Loopback {
			continue
		}
		if _, err := linkemu.Lookup(l); err != nil {
			return fmt.Errorf("--links: %v (or loopback)", err)
		}
	}
	for _, b := range o.Brokers {
		if !slices.Contains([]string{Mosquitto, Hub, Plain, SSH}, b) {
			return fmt.Errorf("--brokers: unknown %q: use mosquitto, hub, plain or ssh", b)
		}
	}
	for _, v := range o.TLS {
		if v != "1.2" && v != "1.3" {
			return fmt.Errorf("--tls: unknown version %q: use 1.2 or 1.3", v)
		}
	}
	for _, q := range o.QoS {
		if q < 0 || q > 2 {
			return fmt.Errorf("--qos: %d: use 0, 1 or 2", q)
		}
	}
	for _, m := range o.MQTT {
		if mqttVersion(m) == 0 {
			return fmt.Errorf("--mqtt: unknown version %q: use 3.1.1 or 5", m)
		}
	}
	if o.Clients > 1000 {
		return fmt.Errorf("--clients: %d is more than 1000", o.Clients)
	}
	return nil
}

// mqttVersion is the protocol level of a version name (0: unknown).
func mqttVersion(s string) byte {
	switch s {
	case "3.1.1", "3", "311":
		return 4
	case "5", "5.0":
		return 5
	}
	return 0
}

// Cell is one point of the matrix. TLS and Suite are "" for plain and ssh.
type Cell struct {
	Link   string `json:"link"`
	Broker string `json:"broker"`
	TLS    string `json:"tls,omitempty"`
	Suite  string `json:"suite,omitempty"`
	MQTT   string `json:"mqtt"`
	QoS    int    `json:"qos"`
}

func (c Cell) String() string {
	s := c.Link + " " + c.Broker
	if c.TLS != "" {
		s += " TLS " + c.TLS + " " + c.Suite
	}
	return fmt.Sprintf("%s MQTT %s QoS %d", s, c.MQTT, c.QoS)
}

// Run is one load run of a cell.
type Run struct {
	Cell
	Rep        int             `json:"rep"`
	Negotiated string          `json:"negotiated,omitempty"` // the suite the broker chose
	Totals     mqttload.Totals `json:"totals"`
	Errors     map[string]int  `json:"errors,omitempty"`
}

// Skip is a cell (any MQTT version and QoS) that was not run, and why.
type Skip struct {
	Link   string `json:"link"`
	Broker string `json:"broker"`
	TLS    string `json:"tls"`
	Suite  string `json:"suite"`
	Reason string `json:"reason"`
}

// Result is a whole matrix.
type Result struct {
	Options Options
	Runs    []Run
	Skips   []Skip
}

// group is the cells one broker start serves.
type group struct {
	broker string
	rsa    bool   // the RSA certificate (else ECDSA)
	only13 string // Mosquitto: the one TLS 1.3 suite this start allows
	tls    []tlsCell
}

type tlsCell struct {
	version string
	s       suite
}

// Matrix runs the matrix: for each link, for each repetition, each broker start in turn
// runs its cells (so a drift of the machine spreads over every broker alike).
func Matrix(ctx context.Context, b *lab.Bench, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{Options: o}, err
	}
	res := Result{Options: o}
	var suites []suite
	for _, n := range o.Suites {
		s, err := parseSuite(n)
		if err != nil {
			return res, fmt.Errorf("--suites: %w", err)
		}
		suites = append(suites, s)
	}
	groups, skips := plan(o, suites)
	p := o.Progress
	if p == nil {
		p = &lab.Progress{W: io.Discard}
	}
	steps := 0
	for _, g := range groups {
		steps += max(len(g.tls), 1) * len(o.MQTT) * len(o.QoS)
	}
	p.Start(steps * o.Reps * len(o.Links))
	env, err := newPeers(ctx, b, o)
	if err != nil {
		return res, err
	}
	defer env.close()
	for _, link := range o.Links {
		for _, sk := range skips {
			sk.Link = link
			res.Skips = append(res.Skips, sk)
		}
		if err := env.useLink(link); err != nil {
			return res, err
		}
		// A TLS 1.3 suite Go will not pick is found on the first run; later runs of
		// that cell are skipped.
		notSelectable := map[string]string{}
		for rep := range o.Reps {
			for _, g := range groups {
				runs, err := runGroup(ctx, env, o, link, rep, g, notSelectable, p)
				res.Runs = append(res.Runs, runs...)
				if err != nil {
					return res, err
				}
			}
		}
		for key, why := range notSelectable {
			br, suite, _ := strings.Cut(key, " ")
			res.Skips = append(res.Skips, Skip{Link: link, Broker: br, TLS: "1.3", Suite: suite, Reason: why})
		}
	}
	p.Done()
	return res, nil
}

// plan groups the cells by broker start and lists those no peer here can run.
func plan(o Options, suites []suite) ([]group, []Skip) {
	var groups []group
	var skips []Skip
	for _, br := range o.Brokers {
		if br == Plain || br == SSH {
			groups = append(groups, group{broker: br})
			continue
		}
		byCert := map[bool]*group{}
		for _, v := range o.TLS {
			for _, s := range suites {
				if s.TLS13 != (v == "1.3") {
					continue
				}
				if s.GoMissing != "" {
					why := "Go's crypto/tls has no DHE suites"
					if br == Mosquitto {
						why += ": Mosquitto could, the load generator (Go, as mqtt-benchmark) cannot offer it"
					}
					skips = append(skips, Skip{Broker: br, TLS: v, Suite: s.Name, Reason: why})
					continue
				}
				if br == Mosquitto && s.TLS13 {
					// Go's client offers every TLS 1.3 suite: Mosquitto allows one.
					groups = append(groups, group{broker: br, only13: s.Name, tls: []tlsCell{{v, s}}})
					continue
				}
				g := byCert[s.RSA]
				if g == nil {
					g = &group{broker: br, rsa: s.RSA}
					byCert[s.RSA] = g
				}
				g.tls = append(g.tls, tlsCell{v, s})
			}
		}
		for _, rsa := range []bool{false, true} {
			if g := byCert[rsa]; g != nil {
				groups = append(groups, *g)
			}
		}
	}
	return groups, skips
}

// runGroup starts g's broker on link and runs each of its cells once.
func runGroup(ctx context.Context, env *peers, o Options, link string, rep int, g group, notSelectable map[string]string, p *lab.Progress) ([]Run, error) {
	target, stop, err := env.start(ctx, g)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", g.broker, link, err)
	}
	defer stop()
	cells := g.tls
	if len(cells) == 0 {
		cells = []tlsCell{{}}
	}
	var runs []Run
	for _, tc := range cells {
		for _, mv := range o.MQTT {
			for _, qos := range o.QoS {
				cell := Cell{Link: link, Broker: g.broker, TLS: tc.version, Suite: tc.s.Name, MQTT: mv, QoS: qos}
				p.Step(fmt.Sprintf("rep %d/%d: %s", rep+1, o.Reps, cell))
				if _, skip := notSelectable[g.broker+" "+tc.s.Name]; skip && tc.s.TLS13 {
					continue
				}
				lo := mqttload.Options{Addr: target.addr, Dial: target.dial, Clients: o.Clients, Messages: o.Messages, Payload: o.Payload,
					QoS: byte(qos), Version: mqttVersion(mv), Identity: target.identity}
				if tc.version != "" {
					cfg, err := clientTLS(target.tls, tc)
					if err != nil {
						return runs, err
					}
					lo.TLS = cfg
				}
				lr, err := mqttload.Run(ctx, lo)
				if err != nil {
					return runs, err
				}
				if !tc.s.TLS13 && lr.TLSSuite != "" && lr.TLSSuite != tls.CipherSuiteName(lo.TLS.CipherSuites[0]) {
					// Offered one suite, got another: a cell measured with the wrong suite
					// is worse than none.
					return runs, fmt.Errorf("%s: the broker negotiated %s", cell, lr.TLSSuite)
				}
				if tc.s.TLS13 && lr.TLSSuite != "" && lr.TLSSuite != tc.s.Name {
					notSelectable[g.broker+" "+tc.s.Name] = fmt.Sprintf("Go lets neither client nor server choose TLS 1.3 suites: the hub's broker picked %s", lr.TLSSuite)
					continue
				}
				runs = append(runs, Run{Cell: cell, Rep: rep, Negotiated: lr.TLSSuite, Totals: lr.Totals, Errors: lr.Errors})
			}
		}
	}
	return runs, nil
}

// clientTLS is the load generator's configuration for one cell: base's trust, one
// version and (TLS 1.2) one suite, through the same policy type as every listener.
func clientTLS(base *tls.Config, tc tlsCell) (*tls.Config, error) {
	cfg := base.Clone()
	pol := tlspolicy.Policy{MinVersion: tc.version, MaxVersion: tc.version, AllowInsecure: true}
	if !tc.s.TLS13 {
		pol.Suites = []string{tc.s.Name}
	}
	if err := pol.Apply(cfg); err != nil {
		return nil, err
	}
	// Every connection a full handshake, as mqtt-benchmark's.
	cfg.ClientSessionCache = nil
	return cfg, nil
}

// RunAndReport runs the matrix, writes the result files into out and prints the summary
// on w. An interrupted run still writes what it measured.
func RunAndReport(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench mqtt matrix: results in %s\n", out)
	res, err := Matrix(ctx, b, o)
	if err != nil && len(res.Runs) == 0 {
		return err
	}
	s := Summarize(res)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(res.Options.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}
