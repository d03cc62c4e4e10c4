package mqttload

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/mqttclient"
)

// Identity is how client i logs in and where it publishes.
type Identity struct {
	ClientID, Username string
	Password           []byte // sent when not nil
	Topic              string
}

// Options of one load run.
type Options struct {
	Addr     string
	Clients  int  // concurrent clients; 0 means 10 (the paper's)
	Messages int  // per client; 0 means 100 (the paper's)
	QoS      byte // 0, 1 or 2
	Version  byte // 4 (MQTT 3.1.1) or 5; 0 means 4
	Payload  int  // bytes per message; 0 means 100
	// TLS, if set, wraps each connection; the client's versions and suites are the
	// run's (the broker picks among what the client offers).
	TLS *tls.Config
	// Dial opens a connection to Addr (a namespace's dialer); nil means net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Identity of client i; nil means client id "loadI", no credentials, topic
	// "bench/I".
	Identity func(i int) Identity
	// Timeout bounds the connection and each message's acknowledgement; 0 means 60 s
	// (mqtt-benchmark's -wait).
	Timeout time.Duration
	// Interval paces each client: a message every Interval, the first at a random
	// offset within it so that a fleet spreads out (a late message goes at once). 0 sends
	// the next as soon as the last is acknowledged (throughput, as the paper's runs).
	Interval time.Duration
	// ConnectConcurrency bounds the connections being set up at once; 0: no bound.
	ConnectConcurrency int
	// Connected, if set, is called once every client has connected or failed to, before
	// the first message: what a fleet of idle connections costs is measured there.
	Connected func(connected int)
	// Published, if set, is called once every client has sent its last message, before
	// any disconnects: what connections that were busy and went idle cost is measured
	// there.
	Published func()
}

func (o *Options) defaults() {
	if o.Clients == 0 {
		o.Clients = 10
	}
	if o.Messages == 0 {
		o.Messages = 100
	}
	if o.Version == 0 {
		o.Version = 4
	}
	if o.Payload == 0 {
		o.Payload = 100
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if o.Identity == nil {
		o.Identity = func(i int) Identity {
			return Identity{ClientID: fmt.Sprintf("load%d", i), Topic: fmt.Sprintf("bench/%d", i)}
		}
	}
	if o.Dial == nil {
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
}

// ClientResult is one client's run, as mqtt-benchmark's RunResults. Times are in
// milliseconds, RunTime in seconds (from before the connection to the last
// acknowledgement, as mqtt-benchmark counts it).
type ClientResult struct {
	ID                   int     `json:"id"`
	Successes            int     `json:"successes"`
	Failures             int     `json:"failures"`
	RunTime              float64 `json:"run_time_s"`
	ConnectMs            float64 `json:"connect_ms"` // TCP, TLS and MQTT CONNECT/CONNACK
	MsgTimeMin           float64 `json:"msg_time_min_ms"`
	MsgTimeMax           float64 `json:"msg_time_max_ms"`
	MsgTimeMean          float64 `json:"msg_time_mean_ms"`
	MsgTimeStd           float64 `json:"msg_time_std_ms"`
	MsgsPerSec           float64 `json:"msgs_per_sec"`
	TLSVersion, TLSSuite string  `json:"-"`
	Err                  string  `json:"error,omitempty"`
}

// Totals are mqtt-benchmark's TotalResults, plus percentiles of all message times.
type Totals struct {
	Ratio           float64 `json:"ratio"`
	Successes       int     `json:"successes"`
	Failures        int     `json:"failures"`
	TotalRunTime    float64 `json:"total_run_time_s"` // wall time of the whole run
	AvgRunTime      float64 `json:"avg_run_time_s"`
	MsgTimeMin      float64 `json:"msg_time_min_ms"`
	MsgTimeMax      float64 `json:"msg_time_max_ms"`
	MsgTimeMeanAvg  float64 `json:"msg_time_mean_avg_ms"`
	MsgTimeMeanStd  float64 `json:"msg_time_mean_std_ms"`
	AvgMsgsPerSec   float64 `json:"avg_bandwidth_msgs_per_sec"`
	TotalMsgsPerSec float64 `json:"total_bandwidth_msgs_per_sec"`
	ConnectMeanMs   float64 `json:"connect_mean_ms"`
	// P are the 5th, 25th, 50th, 75th and 95th percentiles of every message's time.
	P [5]float64 `json:"msg_time_percentiles_ms"`
}

// Result is a whole run.
type Result struct {
	Clients []ClientResult `json:"clients"`
	Totals  Totals         `json:"totals"`
	// TLSVersion and TLSSuite are what the broker chose (the same for every client
	// that connected; "" over plain TCP).
	TLSVersion string `json:"tls_version,omitempty"`
	TLSSuite   string `json:"tls_suite,omitempty"`
	// Errors are the distinct reasons clients failed, with how many.
	Errors map[string]int `json:"errors,omitempty"`
}

// Run connects o.Clients clients at once and has each publish o.Messages messages. A
// client that cannot connect counts all its messages as failures; the run itself fails
// only when ctx ends or the options are wrong.
func Run(ctx context.Context, o Options) (Result, error) {
	o.defaults()
	if o.QoS > 2 || (o.Version != 4 && o.Version != 5) || o.Clients < 0 || o.Messages < 0 || o.Payload < 0 {
		return Result{}, fmt.Errorf("mqttload: QoS 0-2, MQTT version 4 or 5, and no negative counts")
	}
	payload := make([]byte, o.Payload)
	for i := range payload {
		payload[i] = '0' + byte(i%10)
	}
	results := make([]ClientResult, o.Clients)
	samples := make([][]float64, o.Clients)
	start := time.Now()
	f := &fleet{begin: make(chan struct{}), end: make(chan struct{})}
	if o.ConnectConcurrency > 0 {
		f.slots = make(chan struct{}, o.ConnectConcurrency)
	}
	f.setup.Add(o.Clients)
	f.published.Add(o.Clients)
	go func() {
		f.published.Wait()
		if o.Published != nil {
			o.Published()
		}
		close(f.end)
	}()
	go func() {
		f.setup.Wait()
		if o.Connected != nil {
			o.Connected(int(f.connected.Load()))
		}
		close(f.begin)
	}()
	var wg sync.WaitGroup
	for i := range o.Clients {
		wg.Go(func() { results[i], samples[i] = runClient(ctx, o, i, payload, f) })
	}
	wg.Wait()
	<-f.end // Published has returned: nothing of the run goes on after Run
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	res := Result{Clients: results, Totals: totals(results, samples, time.Since(start))}
	for _, c := range results {
		if c.Err != "" {
			if res.Errors == nil {
				res.Errors = map[string]int{}
			}
			res.Errors[c.Err]++
		}
		if c.TLSSuite != "" && res.TLSSuite == "" {
			res.TLSVersion, res.TLSSuite = c.TLSVersion, c.TLSSuite
		}
	}
	return res, nil
}

// fleet is what the clients of a run share: the bound on connections being set up, and
// the start of publishing once every client connected (only with Options.Connected).
type fleet struct {
	slots     chan struct{} // nil: no bound
	setup     sync.WaitGroup
	connected atomic.Int64
	begin     chan struct{}
	published sync.WaitGroup
	end       chan struct{} // closed once Published returned
}

func runClient(ctx context.Context, o Options, i int, payload []byte, f *fleet) (ClientResult, []float64) {
	r := ClientResult{ID: i}
	started := time.Now()
	if f.slots != nil {
		select {
		case f.slots <- struct{}{}:
		case <-ctx.Done():
		}
	}
	conn, err := connect(ctx, o, i, &r)
	if f.slots != nil {
		<-f.slots
	}
	if err == nil {
		f.connected.Add(1)
	}
	f.setup.Done()
	if err != nil {
		f.published.Done()
		r.Failures, r.Err = o.Messages, err.Error()
		r.RunTime = time.Since(started).Seconds()
		return r, nil
	}
	defer conn.Close()
	r.ConnectMs = ms(time.Since(started))
	// Close the connection if the run is cancelled: a publish blocked on its
	// acknowledgement returns at once.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if o.Connected != nil {
		select {
		case <-f.begin:
		case <-ctx.Done():
		}
	}
	topic := o.Identity(i).Topic
	times := make([]float64, 0, o.Messages)
	next := time.Now()
	if o.Interval > 0 {
		next = next.Add(rand.N(o.Interval))
	}
	for m := range o.Messages {
		if o.Interval > 0 {
			if wait := time.Until(next); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
			next = next.Add(o.Interval)
		}
		sent := time.Now()
		err := conn.Publish(topic, payload, o.QoS, uint16(m%65535+1), o.Timeout)
		if err != nil {
			r.Failures++
			if r.Err == "" {
				r.Err = err.Error()
			}
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				r.Failures += o.Messages - m - 1
				break
			}
			continue
		}
		r.Successes++
		times = append(times, ms(time.Since(sent)))
	}
	f.published.Done()
	if o.Published != nil {
		select {
		case <-f.end:
		case <-ctx.Done():
		}
	}
	// A normal DISCONNECT ends the run (at QoS 0 the broker reads everything sent
	// before it).
	conn.Disconnect()
	d := time.Since(started)
	r.RunTime = d.Seconds()
	r.MsgsPerSec = float64(r.Successes) / d.Seconds()
	r.MsgTimeMin, r.MsgTimeMax, r.MsgTimeMean, r.MsgTimeStd = describe(times)
	return r, times
}

// connect dials, does the TLS handshake if asked and logs in.
func connect(ctx context.Context, o Options, i int, r *ClientResult) (*mqttclient.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	nc, err := o.Dial(ctx, o.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if o.TLS != nil {
		tc := tls.Client(nc, o.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		st := tc.ConnectionState()
		r.TLSVersion, r.TLSSuite = tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite)
		nc = tc
	}
	c := mqttclient.New(nc, o.Version, 1<<20)
	id := o.Identity(i)
	if _, err := c.Connect(mqttclient.Options{ClientID: id.ClientID, Username: id.Username, Password: id.Password, Clean: true, Keepalive: time.Minute}, o.Timeout); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// describe is min, max, mean and sample standard deviation (0 for fewer than two).
func describe(v []float64) (lo, hi, mean, std float64) {
	if len(v) == 0 {
		return 0, 0, 0, 0
	}
	lo, hi = slices.Min(v), slices.Max(v)
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) > 1 {
		for _, x := range v {
			std += (x - mean) * (x - mean)
		}
		std = math.Sqrt(std / float64(len(v)-1))
	}
	return lo, hi, mean, std
}

// totals aggregates as mqtt-benchmark's calculateTotalResults: the extreme message
// times, the mean and deviation of the clients' mean times, the mean and sum of their
// bandwidths. Clients that never connected count in the ratio only.
func totals(rs []ClientResult, samples [][]float64, wall time.Duration) Totals {
	t := Totals{TotalRunTime: wall.Seconds()}
	var runTimes, means, rates, connects []float64
	t.MsgTimeMin = math.Inf(1)
	for _, r := range rs {
		t.Successes += r.Successes
		t.Failures += r.Failures
		runTimes = append(runTimes, r.RunTime)
		if r.Successes == 0 {
			continue
		}
		means = append(means, r.MsgTimeMean)
		rates = append(rates, r.MsgsPerSec)
		connects = append(connects, r.ConnectMs)
		t.MsgTimeMin = min(t.MsgTimeMin, r.MsgTimeMin)
		t.MsgTimeMax = max(t.MsgTimeMax, r.MsgTimeMax)
	}
	if math.IsInf(t.MsgTimeMin, 1) {
		t.MsgTimeMin = 0
	}
	if n := t.Successes + t.Failures; n > 0 {
		t.Ratio = float64(t.Successes) / float64(n)
	}
	_, _, t.AvgRunTime, _ = describe(runTimes)
	_, _, t.MsgTimeMeanAvg, t.MsgTimeMeanStd = describe(means)
	_, _, t.AvgMsgsPerSec, _ = describe(rates)
	for _, r := range rates {
		t.TotalMsgsPerSec += r
	}
	_, _, t.ConnectMeanMs, _ = describe(connects)
	all := slices.Concat(samples...)
	slices.Sort(all)
	for k, q := range []float64{0.05, 0.25, 0.5, 0.75, 0.95} {
		t.P[k] = Percentile(all, q)
	}
	return t
}

// Percentile of sorted values by linear interpolation between closest ranks; 0 for none.
func Percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	lo := int(pos)
	if lo+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (pos-float64(lo))*(sorted[lo+1]-sorted[lo])
}
