package mqttbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/childproc"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
)

// BridgeOptions of the bridge experiment.
type BridgeOptions struct {
	Messages   int           // QoS 1 readings in all; 0 means 100,000 (300 with Quick)
	Publishers int           // devices publishing them, one connection each; 0 means 10 (3 with Quick)
	Outages    int           // times the centre stops and starts; 0 means 2 (1 with Quick)
	Down       time.Duration // how long it stays down each time; 0 means 3 s (0.3 s with Quick)
	// Kill: with SIGKILL Mosquitto loses what it acknowledged but had neither saved nor
	// delivered (its persistence is a snapshot a second): CentreAcked tells that loss
	// from the bridge's.
	Kill     bool          // SIGKILL the centre (a crash) instead of SIGTERM
	Timeout  time.Duration // wait at most this long for every reading; 0 means 5 min
	Quick    bool
	Progress *lab.Progress
}

func (o *BridgeOptions) defaults() {
	lab.Default(&o.Messages, o.Quick, 100_000, 300)
	lab.Default(&o.Publishers, o.Quick, 10, 3)
	lab.Default(&o.Outages, o.Quick, 2, 1)
	if o.Down == 0 {
		o.Down = 3 * time.Second
		if o.Quick {
			o.Down = 300 * time.Millisecond
		}
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Publishers > o.Messages {
		o.Publishers = o.Messages
	}
}

// BridgeResult is what the experiment saw.
type BridgeResult struct {
	Options BridgeOptions
	// Published readings acknowledged by the hub (mosquitto_pub exited 0 for its share);
	// PublishErrors are publishers that failed.
	Published     int
	PublishErrors []string
	// At the centre: distinct readings received, duplicates, readings that came before
	// an earlier one of the same device (out of order), and what never came.
	Received, Duplicates, OutOfOrder, Lost int
	// Outages: when each began and how long until the next reading reached the centre.
	Outages []Outage
	// Elapsed from the first publish to the last reading at the centre (or the timeout).
	Elapsed time.Duration
	// PeakQueue is the most readings seen waiting in the bridge's queue (sampled);
	// Bridge is its final status.
	PeakQueue int
	Bridge    string
	// CentreAcked is how many sends the centre acknowledged to the bridge (a message
	// sent again after a lost acknowledgement counts again).
	CentreAcked int
	// ReaderRestarts: times mosquitto_sub gave up reconnecting and was started again.
	ReaderRestarts int
}

// Outage is one stop of the centre.
type Outage struct {
	At        time.Duration `json:"at_s"` // since the first publish
	Down      time.Duration `json:"down_s"`
	FlowAgain time.Duration `json:"flow_again_s"` // from the restart to the next reading at the centre
}

// Bridge runs the bridge experiment.
func Bridge(ctx context.Context, b *lab.Bench, o BridgeOptions) (BridgeResult, error) {
	o.defaults()
	res := BridgeResult{Options: o}
	p := o.Progress
	if p == nil {
		p = &lab.Progress{W: io.Discard}
	}
	p.Start(3)

	// The centre: Debian's Mosquitto over TLS, a password for the site and the reader.
	dir, err := b.Scratch("central")
	if err != nil {
		return res, err
	}
	cert, key, _, err := lab.WriteCert(dir)
	if err != nil {
		return res, err
	}
	p.Step("starting the central broker (Mosquitto)")
	central, err := lab.StartMosquitto(ctx, filepath.Join(dir, "mosquitto"), lab.MosquittoOpts{CertFile: cert, KeyFile: key,
		Users: map[string]string{"site1": "site1-bridge-secret", "reader": "reader-secret"}})
	if err != nil {
		return res, err
	}
	defer central.Stop()

	// The site: a hub with devices dev0..devP-1 (telemetry secrets) and the bridge.
	pw := filepath.Join(dir, "bridge.pw")
	if err := os.WriteFile(pw, []byte("site1-bridge-secret\n"), 0o600); err != nil {
		return res, err
	}
	secrets := map[string]string{}
	opts := lab.IoTsafeOpts{Sessions: o.Publishers, Frontdoor: true,
		Configure: func(c *hub.Config) {
			qos := 1
			c.MQTT.TLSListen = "127.0.0.1:0"
			c.MQTT.Bridge = &mqttbridge.Config{Address: central.Addr, CA: cert, ServerName: "lab", Username: "site1", PasswordFile: pw, ClientID: "site1",
				Topics: []mqttbridge.Rule{{Pattern: "#", Direction: "out", QoS: &qos, Local: "devices/", Remote: "site1/devices/"}}}
		},
		Secrets: func(n, secret string) { secrets[n] = secret }}
	p.Step("starting the site hub with its bridge")
	hub, err := b.StartIoTsafe(ctx, "site", opts)
	if err != nil {
		return res, err
	}
	defer hub.Proc.Stop()
	if hub.MQTTTLS == "" || hub.Front == nil {
		return res, fmt.Errorf("the site hub names no MQTT TLS listener")
	}

	// The reader at the centre: a persistent session, so what arrives while it
	// reconnects after a restart of the centre waits for it.
	host, port, _ := strings.Cut(central.Addr, ":")
	rd := newReader(o.Publishers, o.Messages)
	startReader := func(ctx context.Context) (*lab.Proc, error) {
		p, err := lab.StartProc("reader", nil, "stdbuf", "-oL", "mosquitto_sub", "-h", host, "-p", port, "--cafile", cert, "--insecure",
			"-u", "reader", "-P", "reader-secret", "-i", "reader", "-c", "-q", "1", "-t", "site1/devices/#", "-d")
		if err != nil {
			return nil, err
		}
		// A restarted reader's persistent session delivers what the centre held for it
		// right after CONNACK, before the SUBACK: those readings count too.
		if _, err := p.ReadLineSeeing(ctx, "Client reader received SUBACK", rd.tally); err != nil {
			p.Stop()
			return nil, err
		}
		return p, nil
	}
	reader, err := startReader(ctx)
	if err != nil {
		return res, err
	}
	readerDone := make(chan struct{})
	defer func() { <-readerDone }()
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		defer close(readerDone)
		rd.consume(readCtx, reader, startReader)
	}()

	// The devices: one mosquitto_pub per device, reading its readings from stdin.
	p.Step(fmt.Sprintf("publishing %d QoS 1 readings from %d devices; the centre stops %d times", o.Messages, o.Publishers, o.Outages))
	hh, hp, _ := strings.Cut(hub.MQTTTLS, ":")
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	per := o.Messages / o.Publishers
	for k := range o.Publishers {
		n := per
		if k == o.Publishers-1 {
			n = o.Messages - per*(o.Publishers-1)
		}
		name := fmt.Sprintf("dev%d", k)
		cmd := exec.CommandContext(ctx, "mosquitto_pub", "-h", hh, "-p", hp, "--cafile", hub.Front.CAFile, "--insecure",
			"-u", name, "-P", secrets[name], "-i", name, "-q", "1", "-t", "devices/"+name+"/notifications/n", "-l")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := childproc.Start(cmd); err != nil {
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := bufio.NewWriter(stdin)
			for i := range n {
				fmt.Fprintf(w, "%d:%d\n", k, i)
			}
			w.Flush()
			stdin.Close()
			err := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.PublishErrors = append(res.PublishErrors, fmt.Sprintf("%s: %v: %s", name, err, strings.TrimSpace(out.String())))
				return
			}
			res.Published += n
		}()
	}

	// Sample the bridge's queue.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan int, 1)
	go func() {
		peak := 0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := hub.Status(); err == nil && st.MQTT != nil && st.MQTT.Bridge != nil {
				peak = max(peak, st.MQTT.Bridge.Queued)
			}
			select {
			case <-sampleCtx.Done():
				sampled <- peak
				return
			case <-t.C:
			}
		}
	}()

	// Outages: the centre stops once the reader has seen its share of readings.
	for i := range o.Outages {
		if err := rd.waitCount(ctx, o.Messages*(i+1)/(o.Outages+1)); err != nil {
			break
		}
		out := Outage{At: time.Since(start), Down: o.Down}
		if o.Kill {
			central.Kill()
		} else {
			central.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(o.Down):
		}
		if err := central.Start(ctx); err != nil {
			return res, fmt.Errorf("restarting the central broker: %w", err)
		}
		restarted, before := time.Now(), rd.count()
		fctx, cancel := context.WithTimeout(ctx, o.Timeout)
		if err := rd.waitCount(fctx, before+1); err == nil {
			out.FlowAgain = time.Since(restarted)
		}
		cancel()
		res.Outages = append(res.Outages, out)
	}
	wg.Wait()
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	err = rd.waitCount(wctx, res.Published)
	cancel()
	res.Elapsed = time.Since(start)
	stopSampling()
	res.PeakQueue = <-sampled
	if st, serr := hub.Status(); serr == nil && st.MQTT != nil && st.MQTT.Bridge != nil {
		br := st.MQTT.Bridge
		res.Bridge = fmt.Sprintf("%s, %d queued, %d sent, %d acknowledged by the centre, %d reconnections", br.State, br.Queued, br.Sent, br.Delivered, br.Reconnects)
		res.CentreAcked = int(br.Delivered)
	}
	res.Received, res.Duplicates, res.OutOfOrder = rd.totals()
	rd.mu.Lock()
	res.ReaderRestarts = rd.restarts
	rd.mu.Unlock()
	res.Lost = res.Published - res.Received
	p.Done()
	if err != nil && ctx.Err() == nil {
		// Not every reading came: that is the result, not a failure of the run.
		return res, nil
	}
	return res, ctx.Err()
}

// reader tallies the readings arriving at the centre: "dK:i" payloads, i counting up
// per device.
type reader struct {
	mu      sync.Mutex
	changed chan struct{}
	seen    [][]bool
	last    []int
	got     int
	dups    int
	order   int
	// restarts counts mosquitto_sub's restarts (it gave up reconnecting).
	restarts int
}

func newReader(devices, messages int) *reader {
	r := &reader{changed: make(chan struct{}), seen: make([][]bool, devices), last: make([]int, devices)}
	for i := range r.seen {
		r.seen[i] = make([]bool, messages/devices+messages%devices)
		r.last[i] = -1
	}
	return r
}

// consume tallies what p prints until ctx ends. mosquitto_sub gives up after some
// restarts of a crashed (SIGKILLed) Mosquitto: it is started again, with its persistent
// session, so the reader never misses what the centre holds for it.
func (r *reader) consume(ctx context.Context, p *lab.Proc, restart func(context.Context) (*lab.Proc, error)) {
	defer func() { p.Stop() }()
	for {
		// Payload lines ("K:I") among mosquitto_sub -d's protocol trace.
		l, err := p.ReadLine(ctx, "")
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.Stop()
			for {
				if p, err = restart(ctx); err == nil || ctx.Err() != nil {
					break
				}
				select { // the centre is down: try again shortly
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
			if err != nil {
				return
			}
			r.mu.Lock()
			r.restarts++
			r.mu.Unlock()
			continue
		}
		r.tally(l)
	}
}

// tally counts one line of mosquitto_sub's output if it is a reading.
func (r *reader) tally(l string) {
	k, i, ok := parseReading(l)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k < len(r.seen) && i < len(r.seen[k]) {
		switch {
		case r.seen[k][i]:
			r.dups++
		default:
			if i < r.last[k] {
				r.order++
			}
			r.seen[k][i], r.last[k] = true, max(r.last[k], i)
			r.got++
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func parseReading(l string) (k, i int, ok bool) {
	a, b, found := strings.Cut(strings.TrimSpace(l), ":")
	if !found {
		return 0, 0, false
	}
	k, err1 := strconv.Atoi(a)
	i, err2 := strconv.Atoi(b)
	return k, i, err1 == nil && err2 == nil && k >= 0 && i >= 0
}

func (r *reader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

func (r *reader) totals() (got, dups, order int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got, r.dups, r.order
}

// waitCount waits until n distinct readings arrived.
func (r *reader) waitCount(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		got, ch := r.got, r.changed
		r.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
