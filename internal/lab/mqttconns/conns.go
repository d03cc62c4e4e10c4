package mqttconns

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/mqttload"
)

// The brokers the fleet runs against.
const (
	Hub       = "hub"
	Mosquitto = "mosquitto"
)

// Options of the experiment.
type Options struct {
	Clients  int           // concurrent device connections; 0 means 10,000 (50 with Quick)
	Duration time.Duration // publishing, after every device connected; 0 means 60 s (2 s with Quick)
	Interval time.Duration // between one device's readings; 0 means 1 s
	// ConnectConcurrency bounds TLS handshakes at once; 0 means 200.
	ConnectConcurrency int
	Brokers            []string // default hub and mosquitto
	Quick              bool
	Progress           *lab.Progress
}

func (o *Options) defaults() error {
	if o.Clients < 0 || o.Duration < 0 || o.Interval < 0 || o.ConnectConcurrency < 0 {
		return fmt.Errorf("--clients, --duration, --interval and --connect-concurrency must not be negative")
	}
	if o.Clients == 0 {
		o.Clients = 10_000
		if o.Quick {
			o.Clients = 50
		}
	}
	if o.Duration == 0 {
		o.Duration = time.Minute
		if o.Quick {
			o.Duration = 2 * time.Second
		}
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.ConnectConcurrency == 0 {
		o.ConnectConcurrency = 200
	}
	if len(o.Brokers) == 0 {
		o.Brokers = []string{Hub, Mosquitto}
	}
	for _, b := range o.Brokers {
		if b != Hub && b != Mosquitto {
			return fmt.Errorf("--brokers: unknown %q: use hub or mosquitto", b)
		}
	}
	// One descriptor per connection on each side, plus the hub's own: the lab's and the
	// broker's limits must hold them (RaiseFileLimit raised them as far as allowed).
	if o.Clients > 18_000 {
		return fmt.Errorf("--clients: %d is more than this lab can hold (one descriptor per connection on each side; the machine's hard limit is about 20,000)", o.Clients)
	}
	return nil
}

// Fleet is one broker's run.
type Fleet struct {
	Broker    string  `json:"broker"`
	Clients   int     `json:"clients"`
	Connected int     `json:"connected"`
	ConnectS  float64 `json:"connect_s"` // until every device connected (or failed)
	// PublishS is from then to the last acknowledgement: above Duration, the broker
	// did not keep up.
	PublishS float64        `json:"publish_s"`
	Messages int            `json:"messages"` // readings sent
	Acked    int            `json:"acked"`    // acknowledged by the broker (QoS 1 PUBACK)
	Failures int            `json:"failures"`
	Errors   map[string]int `json:"errors,omitempty"`
	// Memory of the broker's process in KiB: started and idle (Base), with every device
	// connected and idle (Idle), the most while publishing (Busy), and with every device
	// still connected once publishing ended (Quiet: an active connection gone idle); per
	// connection is the growth over Base divided by the devices connected.
	Base            lab.Memory `json:"base"`
	Idle            lab.Memory `json:"idle"`
	Busy            lab.Memory `json:"busy"`
	Quiet           lab.Memory `json:"quiet"`
	PerConnIdleKiB  float64    `json:"per_conn_idle_kib"` // PSS
	PerConnBusyKiB  float64    `json:"per_conn_busy_kib"`
	PerConnQuietKiB float64    `json:"per_conn_quiet_kib"`
	MsgTimeP        [5]float64 `json:"msg_time_percentiles_ms"`
	MsgTimeMean     float64    `json:"msg_time_mean_ms"`
	MessagesPerS    float64    `json:"messages_per_s"`
	TLSVersion      string     `json:"tls_version"`
	TLSSuite        string     `json:"tls_suite"`
	NoLoss          bool       `json:"no_loss"` // every reading of every device acknowledged
}

// Result is the whole experiment.
type Result struct {
	Options Options
	Fleets  []Fleet
}

// Measure runs the fleet against each broker in turn.
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
	lab.RaiseFileLimit(p)
	p.Start(3 * len(o.Brokers))
	dir, err := b.Scratch("mqtt-fleet")
	if err != nil {
		return res, err
	}
	cert, key, trust, err := lab.WriteServerCert(dir, "fleet", false)
	if err != nil {
		return res, err
	}
	secrets := map[string]string{}
	p.Step(fmt.Sprintf("enrolling %d devices with secrets", o.Clients))
	hubData, err := b.EnrollIoTsafe(ctx, "mqtt-fleet-hub", lab.IoTsafeOpts{Sessions: o.Clients,
		Secrets: func(n, s string) { secrets[n] = s }})
	if err != nil {
		return res, err
	}
	for _, broker := range o.Brokers {
		var addr string
		var pid int
		var stop func()
		switch broker {
		case Hub:
			cfg := func(c *hub.Config) {
				c.MQTT.TLSListen, c.MQTT.Cert, c.MQTT.Key, c.MQTT.MaxClients = "127.0.0.1:0", cert, key, o.Clients+100
				// The whole fleet comes from one address here, as a fleet behind one NAT
				// would: the hub's cap on handshakes per source (64 by default) must admit
				// the bench's concurrency, or it sheds the rest (Mosquitto has no such cap).
				c.MQTT.MaxUnauthenticatedPerAddress = o.ConnectConcurrency + 16
				c.MQTT.MaxUnauthenticated = max(c.MQTT.MaxUnauthenticated, o.ConnectConcurrency+16)
			}
			srv, err := b.StartEnrolled(ctx, hubData, lab.IoTsafeOpts{Sessions: o.Clients, Configure: cfg})
			if err != nil {
				return res, err
			}
			addr, pid, stop = srv.MQTTTLS, srv.Proc.PID(), srv.Proc.Stop
		case Mosquitto:
			mdir, err := b.Scratch("mosquitto")
			if err != nil {
				return res, err
			}
			p.Note(fmt.Sprintf("hashing %d passwords for Mosquitto", len(secrets)))
			m, err := lab.StartMosquitto(ctx, mdir, lab.MosquittoOpts{CertFile: cert, KeyFile: key, Users: secrets})
			if err != nil {
				return res, err
			}
			addr, pid, stop = m.Addr, m.PID(), m.Stop
		}
		f, err := runFleet(ctx, o, broker, addr, pid, trust, secrets, p)
		stop()
		res.Fleets = append(res.Fleets, f)
		if err != nil {
			return res, err
		}
	}
	p.Done()
	return res, nil
}

// settle lets a broker's memory settle (Go's collector and the hub's release once it is
// quiet, Mosquitto's allocator) before it is read: the lab's readings are of a steady
// state, not of a burst. The same wait for every broker. --quick checks the harness only.
func settle(o Options) time.Duration {
	if o.Quick {
		return time.Second
	}
	return 10 * time.Second
}

func runFleet(ctx context.Context, o Options, broker, addr string, pid int, trust *tls.Config, secrets map[string]string, p *lab.Progress) (Fleet, error) {
	f := Fleet{Broker: broker, Clients: o.Clients}
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	sleep(settle(o))
	f.Base, _ = lab.TreeMemory(pid)
	p.Step(fmt.Sprintf("%s: connecting %d devices over TLS", broker, o.Clients))
	start := time.Now()
	var publishing time.Time // set once every device connected and memory was read
	lo := mqttload.Options{Addr: addr, Clients: o.Clients, Messages: int(o.Duration / o.Interval), QoS: 1, Version: 5,
		TLS: trust.Clone(), Interval: o.Interval, ConnectConcurrency: o.ConnectConcurrency, Timeout: 30 * time.Second,
		Identity: func(i int) mqttload.Identity {
			n := fmt.Sprintf("dev%d", i)
			return mqttload.Identity{ClientID: n, Username: n, Password: []byte(secrets[n]), Topic: "devices/" + n + "/notifications/reading"}
		},
		Connected: func(n int) {
			f.Connected, f.ConnectS = n, time.Since(start).Seconds()
			defer func() { publishing = time.Now() }()
			sleep(settle(o))
			f.Idle, _ = lab.TreeMemory(pid)
			p.Step(fmt.Sprintf("%s: %d connected in %.1f s; each publishes a QoS 1 reading every %v for %v", broker, n, f.ConnectS, o.Interval, o.Duration))
		}}
	// Busy memory: the most seen in the second half of the publishing window.
	busySince := make(chan time.Time, 1)
	userConnected := lo.Connected
	lo.Connected = func(n int) {
		userConnected(n)
		busySince <- time.Now().Add(o.Duration / 2)
	}
	done := make(chan struct{})
	sampled := make(chan lab.Memory, 1)
	go func() {
		var peak lab.Memory
		defer func() { sampled <- peak }()
		var from time.Time
		select {
		case from = <-busySince:
		case <-done:
			return
		}
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if time.Now().After(from) {
					if cur, err := lab.TreeMemory(pid); err == nil && cur.PSS > peak.PSS {
						peak = cur
					}
				}
			}
		}
	}()
	lo.Published = func() {
		if !publishing.IsZero() {
			f.PublishS = time.Since(publishing).Seconds()
		}
		close(done)
		f.Busy = <-sampled
		p.Note(fmt.Sprintf("%s: publishing ended; every device stays connected, idle, for %v", broker, settle(o)))
		sleep(settle(o))
		f.Quiet, _ = lab.TreeMemory(pid)
	}
	r, err := mqttload.Run(ctx, lo)
	if f.PublishS == 0 && !publishing.IsZero() {
		f.PublishS = time.Since(publishing).Seconds()
	}
	if err != nil {
		return f, err
	}
	t := r.Totals
	f.Messages, f.Acked, f.Failures, f.Errors = t.Successes+t.Failures, t.Successes, t.Failures, r.Errors
	f.MsgTimeP, f.MsgTimeMean, f.TLSVersion, f.TLSSuite = t.P, t.MsgTimeMeanAvg, r.TLSVersion, r.TLSSuite
	if f.PublishS > 0 {
		f.MessagesPerS = float64(t.Successes) / f.PublishS
	}
	if f.Connected > 0 {
		f.PerConnIdleKiB = float64(f.Idle.PSS-f.Base.PSS) / float64(f.Connected)
		f.PerConnBusyKiB = float64(f.Busy.PSS-f.Base.PSS) / float64(f.Connected)
		f.PerConnQuietKiB = float64(f.Quiet.PSS-f.Base.PSS) / float64(f.Connected)
	}
	f.NoLoss = f.Connected == o.Clients && f.Failures == 0 && f.Acked == o.Clients*lo.Messages
	return f, nil
}

// Summary is summary.json (schema iotsafe.bench.mqtt-connections/1, docs/bench.md).
type Summary struct {
	Schema    string  `json:"schema"`
	Quick     bool    `json:"quick"`
	Clients   int     `json:"clients"`
	DurationS float64 `json:"duration_s"`
	IntervalS float64 `json:"interval_s"`
	Fleets    []Fleet `json:"fleets"`
	// HubOverMosquittoIdle, Busy and Quiet: the hub's memory per connection over
	// Mosquitto's.
	HubOverMosquittoIdle  float64 `json:"hub_over_mosquitto_idle,omitempty"`
	HubOverMosquittoBusy  float64 `json:"hub_over_mosquitto_busy,omitempty"`
	HubOverMosquittoQuiet float64 `json:"hub_over_mosquitto_quiet,omitempty"`
	// TargetMet: every device of the hub's fleet connected and every reading
	// acknowledged (issue 14: 10,000 connections, no loss).
	TargetMet bool `json:"target_met"`
}

// Summarize computes the summary.
func Summarize(r Result) Summary {
	s := Summary{Schema: "iotsafe.bench.mqtt-connections/1", Quick: r.Options.Quick, Clients: r.Options.Clients,
		DurationS: r.Options.Duration.Seconds(), IntervalS: r.Options.Interval.Seconds(), Fleets: r.Fleets}
	byName := map[string]Fleet{}
	for _, f := range r.Fleets {
		byName[f.Broker] = f
	}
	h, okH := byName[Hub]
	m, okM := byName[Mosquitto]
	if okH && okM && m.PerConnIdleKiB > 0 && m.PerConnBusyKiB > 0 {
		s.HubOverMosquittoIdle = h.PerConnIdleKiB / m.PerConnIdleKiB
		s.HubOverMosquittoBusy = h.PerConnBusyKiB / m.PerConnBusyKiB
	}
	if okH && okM && m.PerConnQuietKiB > 0 {
		s.HubOverMosquittoQuiet = h.PerConnQuietKiB / m.PerConnQuietKiB
	}
	s.TargetMet = okH && h.NoLoss && h.Clients >= 10_000
	return s
}
