package mqttbridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/iotsafe/iotsafe/internal/mqttclient"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Local is the site broker: where messages coming in over the bridge are published.
type Local interface {
	Publish(topic string, payload []byte, retain bool, qos byte) error
}

// QueueFile is the bridge's queue in the data folder.
const QueueFile = "mqtt-bridge.db"

// Limits of one connection to the central broker.
const (
	maxWindow   = 64      // outgoing QoS 1/2 messages in flight (less if the centre says so)
	inWindow    = 64      // incoming ones the bridge takes at once (MQTT 5 receive maximum)
	maxIn       = 1 << 20 // largest packet taken from the centre
	minBackoff  = 500 * time.Millisecond
	maxBackoff  = 30 * time.Second
	stableAfter = 30 * time.Second // a connection that lasted this long resets the backoff
	qos0Buffer  = 1024
	// sessionExpiry keeps the bridge's session at an MQTT 5 centre for a day, so messages
	// for the site wait there while the bridge is away (MQTT 3.1.1: clean session off).
	sessionExpiry = 24 * time.Hour
)

// Bridge states.
const (
	StateConnecting = "connecting"
	StateConnected  = "connected"
	StateDown       = "down"
)

// Bridge is the running bridge.
type Bridge struct {
	cfg   Config
	q     *Queue
	local Local
	log   *slog.Logger
	tls   *tls.Config // nil with InsecurePlain
	gate  *throttle.LogGate
	qos0  chan Message

	connected  atomic.Bool
	subscribed atomic.Bool // the centre acknowledged the in rules' subscriptions on this connection
	mu         sync.Mutex
	state      string
	since      time.Time
	lastErr    string

	sent, delivered, received, refused, dropped0, reconnects atomic.Int64

	cancel context.CancelFunc
	done   chan struct{}
}

// New opens the queue at queuePath and prepares the TLS client; Start connects. cfg has
// passed ApplyDefaults and Validate.
func New(cfg Config, queuePath string, local Local, log *slog.Logger) (*Bridge, error) {
	b := &Bridge{cfg: cfg, local: local, log: log, gate: throttle.NewLogGate(time.Minute), qos0: make(chan Message, qos0Buffer), state: StateConnecting, since: time.Now()}
	if !cfg.InsecurePlain {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("mqtt.bridge.ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mqtt.bridge.ca: %s has no PEM certificate", cfg.CA)
		}
		tc := &tls.Config{RootCAs: pool, ServerName: cfg.ServerName, NextProtos: []string{"mqtt"}}
		if err := cfg.TLS.Apply(tc); err != nil {
			return nil, err
		}
		if !tc.SessionTicketsDisabled {
			tc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		}
		if cfg.Cert != "" {
			// Read at every connection, so a renewed certificate is used without a restart.
			if _, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key); err != nil {
				return nil, fmt.Errorf("mqtt.bridge: client certificate: %w", err)
			}
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				c, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
				return &c, err
			}
		}
		b.tls = tc
	}
	if cfg.PasswordFile != "" {
		fi, err := os.Stat(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt.bridge.password_file: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the bridge's password file is readable by others: chmod 600 it", "file", cfg.PasswordFile)
		}
	}
	q, err := OpenQueue(queuePath, cfg.Queue)
	if err != nil {
		return nil, err
	}
	b.q = q
	return b, nil
}

// Start connects in the background, and keeps reconnecting until Close.
func (b *Bridge) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		b.run(ctx)
	}()
}

// Close disconnects and closes the queue; what waits in it stays for the next start.
func (b *Bridge) Close() error {
	if b.cancel != nil {
		b.cancel()
		<-b.done
	}
	return b.q.Close()
}

// Forward takes a message a device published at the site: a QoS 1 or 2 message that a
// rule sends out is on disk when Forward returns (the site broker acknowledges it only
// then); a QoS 0 one is sent if the bridge is up, else dropped and counted. It returns
// ErrFull when the queue is full and refuses.
// Sends reports whether an out rule carries topic to the centre.
func (b *Bridge) Sends(topic string) bool {
	_, _, ok := route(b.cfg.Topics, Out, topic)
	return ok
}

func (b *Bridge) Forward(ctx context.Context, topic string, payload []byte, qos byte, retain bool) error {
	to, maxQoS, ok := route(b.cfg.Topics, Out, topic)
	if !ok {
		return nil
	}
	m := Message{Topic: to, Payload: append([]byte(nil), payload...), QoS: min(qos, maxQoS), Retain: retain}
	if m.QoS == 0 {
		if b.connected.Load() {
			select {
			case b.qos0 <- m:
				return nil
			default:
			}
		}
		b.dropped0.Add(1)
		return nil
	}
	return b.q.Put(ctx, m)
}

func (b *Bridge) setState(s string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != s {
		b.state, b.since = s, time.Now()
	}
	if err != nil {
		b.lastErr = err.Error()
	}
}

// run connects, serves the connection until it ends, and reconnects with backoff.
func (b *Bridge) run(ctx context.Context) {
	backoff := minBackoff
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			b.reconnects.Add(1)
		}
		b.setState(StateConnecting, nil)
		up, err := b.session(ctx)
		b.connected.Store(false)
		b.subscribed.Store(false)
		if ctx.Err() != nil {
			return
		}
		if up > 0 {
			b.log.Warn("the bridge to the central broker is down; reconnecting", "address", b.cfg.Address, "err", err, "was_up", up.Round(time.Millisecond))
		} else if ok, n := b.gate.Allow("connect|" + err.Error()); ok {
			b.log.Warn("the bridge cannot reach the central broker; retrying", "address", b.cfg.Address, "err", err, "failures_not_logged", n)
		}
		b.setState(StateDown, err)
		if up >= stableAfter {
			backoff = minBackoff
		}
		// ±20% jitter, so the sites of a region do not all come back in one second.
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// dial opens the TCP and TLS connection.
func (b *Bridge) dial(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	nc, err := (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", b.cfg.Address)
	if err != nil {
		return nil, err
	}
	if b.tls == nil {
		return nc, nil
	}
	tc := tls.Client(nc, b.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return tc, nil
}

// connect logs in: how many messages may be in flight and the highest QoS the centre
// takes.
func (b *Bridge) connect(c *mqttclient.Conn) (window int, maxQoS byte, err error) {
	o := mqttclient.Options{ClientID: b.cfg.ClientID, Username: b.cfg.Username, Keepalive: b.cfg.Keepalive,
		SessionExpiry: sessionExpiry, ReceiveMaximum: inWindow}
	if b.cfg.PasswordFile != "" {
		pw, err := os.ReadFile(b.cfg.PasswordFile)
		if err != nil {
			return 0, 0, fmt.Errorf("password file: %w", err)
		}
		o.Password = []byte(strings.TrimRight(string(pw), "\r\n"))
	}
	ack, err := c.Connect(o, 15*time.Second)
	if err != nil {
		var refused *mqttclient.RefusedError
		if errors.As(err, &refused) {
			return 0, 0, fmt.Errorf("the central broker refused the bridge: %s", refused.Reason)
		}
		return 0, 0, err
	}
	return min(maxWindow, ack.ReceiveMaximum), ack.MaxQoS, nil
}

// session serves one connection until it ends; up is how long it was connected.
func (b *Bridge) session(ctx context.Context) (up time.Duration, err error) {
	nc, err := b.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	v := b.cfg.version()
	c := mqttclient.New(nc, v, maxIn)
	window, maxQoS, err := b.connect(c)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	b.connected.Store(true)
	b.setState(StateConnected, nil)
	b.log.Info("bridge connected to the central broker", "address", b.cfg.Address, "client_id", b.cfg.ClientID, "window", window)
	defer func() { up = time.Since(start) }()

	ids := &packetIDs{used: map[uint16]bool{}}
	if err := b.subscribe(c, ids); err != nil {
		return 0, err
	}
	// Room for an ack of every message in flight: the reader never waits on the session
	// (which may itself be waiting to write to a centre that waits for us to read).
	acks := make(chan packets.Packet, maxWindow)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() { readErr <- b.reader(c, acks, stop) }()

	inflight := map[uint16]uint64{} // packet id -> queue seq of what the centre has not acknowledged
	var cursor uint64
	ping := time.NewTicker(b.cfg.Keepalive / 2)
	defer ping.Stop()
	for {
		if len(inflight) < window {
			msgs, err := b.q.Read(cursor, window-len(inflight))
			if err != nil {
				return up, err
			}
			if len(msgs) > 0 {
				out := make([]*packets.Packet, 0, len(msgs))
				for _, m := range msgs {
					id := ids.next()
					qos := min(m.QoS, maxQoS) // 1, or 0 if the centre takes no more
					inflight[id] = m.Seq
					out = append(out, publishPacket(m, qos, id))
					cursor = m.Seq
				}
				if err := c.Write(out...); err != nil {
					return up, err
				}
				b.sent.Add(int64(len(out)))
			}
		}
		select {
		case <-ctx.Done():
			_ = c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}})
			return up, ctx.Err()
		case err := <-readErr:
			return up, err
		case pk := <-acks:
			for more := true; more; {
				b.acked(pk, inflight, ids)
				select {
				case pk = <-acks:
				default:
					more = false
				}
			}
		case <-b.q.Changed():
		case m := <-b.qos0:
			if err := c.Write(publishPacket(m, 0, 0)); err != nil {
				return up, err
			}
			b.sent.Add(1)
		case <-ping.C:
			if err := c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}); err != nil {
				return up, err
			}
		}
	}
}

func publishPacket(m Message, qos byte, id uint16) *packets.Packet {
	return &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: m.Retain}, TopicName: m.Topic, Payload: m.Payload, PacketID: id}
}

// acked handles the centre's PUBACK of an outgoing message.
func (b *Bridge) acked(pk packets.Packet, inflight map[uint16]uint64, ids *packetIDs) {
	seq, ok := inflight[pk.PacketID]
	if !ok || pk.FixedHeader.Type != packets.Puback {
		return // an ack of nothing in flight: ignored, as MQTT says
	}
	if pk.ReasonCode >= 0x80 {
		// The centre refused it (MQTT 5: not authorized, quota): sending it again would
		// be refused again, so it is dropped, counted and said once a minute.
		b.refused.Add(1)
		if ok, n := b.gate.Allow("refused|" + fmt.Sprint(pk.ReasonCode)); ok {
			b.log.Warn("the central broker refused a bridged message; dropped", "reason", fmt.Sprintf("0x%02x", pk.ReasonCode), "detail", pk.Properties.ReasonString, "more_not_logged", n)
		}
	} else {
		b.delivered.Add(1)
	}
	b.q.Ack(seq)
	delete(inflight, pk.PacketID)
	ids.free(pk.PacketID)
}

// subscribe asks the centre for what comes in: one SUBSCRIBE for every in rule.
func (b *Bridge) subscribe(c *mqttclient.Conn, ids *packetIDs) error {
	pk := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}}
	for _, r := range b.cfg.Topics {
		if r.receives() {
			// No-local: the centre does not send back what the bridge itself published.
			pk.Filters = append(pk.Filters, packets.Subscription{Filter: r.Remote + r.Pattern, Qos: byte(*r.QoS),
				NoLocal: b.cfg.version() == 5, RetainAsPublished: b.cfg.version() == 5})
		}
	}
	if len(pk.Filters) == 0 {
		b.subscribed.Store(true)
		return nil
	}
	pk.PacketID = ids.next()
	return c.Write(pk)
}

// inFilters are the remote filters the in rules subscribe to, in order.
func (b *Bridge) inFilters() []string {
	var out []string
	for _, r := range b.cfg.Topics {
		if r.receives() {
			out = append(out, r.Remote+r.Pattern)
		}
	}
	return out
}

// reader reads what the centre sends until the connection fails or stop: acks go to
// the session, messages to the site broker.
func (b *Bridge) reader(c *mqttclient.Conn, acks chan<- packets.Packet, stop <-chan struct{}) error {
	pending := map[uint16]bool{} // incoming QoS 2 messages between PUBREC and PUBREL
	for {
		_ = c.NetConn().SetReadDeadline(time.Now().Add(b.cfg.Keepalive * 3 / 2))
		pk, err := c.Read()
		if err != nil {
			return err
		}
		switch pk.FixedHeader.Type {
		case packets.Publish:
			if err := b.incoming(c, pk, pending); err != nil {
				return err
			}
		case packets.Puback:
			select {
			case acks <- pk:
			case <-stop:
				return nil
			}
		case packets.Pubrel:
			delete(pending, pk.PacketID)
			if err := c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: pk.PacketID}); err != nil {
				return err
			}
		case packets.Suback:
			for i, code := range pk.ReasonCodes {
				if code >= 0x80 {
					b.log.Warn("the central broker refused a bridge subscription: nothing comes in on it", "filter", b.inFilters()[min(i, len(b.inFilters())-1)], "code", fmt.Sprintf("0x%02x", code))
				}
			}
			b.subscribed.Store(true)
			b.log.Info("the central broker acknowledged the bridge's subscriptions", "filters", strings.Join(b.inFilters(), " "))
		case packets.Disconnect:
			return fmt.Errorf("the central broker disconnected the bridge (reason 0x%02x %s)", pk.ReasonCode, pk.Properties.ReasonString)
		case packets.Pingresp, packets.Unsuback, packets.Auth, packets.Pubrec, packets.Pubcomp:
			// The bridge sends at QoS 0 and 1 only: a QoS 2 ack is of nothing it sent.
		default:
			return fmt.Errorf("%w: unexpected packet type %d", mqttclient.ErrMalformed, pk.FixedHeader.Type)
		}
	}
}

// incoming publishes a message from the centre at the site and acknowledges it.
func (b *Bridge) incoming(c *mqttclient.Conn, pk packets.Packet, pending map[uint16]bool) error {
	qos := pk.FixedHeader.Qos
	if qos == 2 && pending[pk.PacketID] {
		// Sent again before our PUBREC arrived: already published here.
		return c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
	}
	if to, maxQoS, ok := route(b.cfg.Topics, In, pk.TopicName); ok {
		if err := b.local.Publish(to, pk.Payload, pk.FixedHeader.Retain, min(qos, maxQoS)); err != nil {
			return fmt.Errorf("publishing %s at the site: %w", to, err)
		}
		b.received.Add(1)
	} else if ok, _ := b.gate.Allow("unrouted|" + pk.TopicName); ok {
		b.log.Warn("the central broker sent a topic no in rule maps; dropped", "topic", pk.TopicName)
	}
	switch qos {
	case 1:
		return c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
	case 2:
		pending[pk.PacketID] = true
		return c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
	}
	return nil
}

// packetIDs hands out packet identifiers not in use.
type packetIDs struct {
	last uint16
	used map[uint16]bool
}

func (p *packetIDs) next() uint16 {
	for {
		p.last++
		if p.last != 0 && !p.used[p.last] {
			p.used[p.last] = true
			return p.last
		}
	}
}

func (p *packetIDs) free(id uint16) { delete(p.used, id) }

// Status is the bridge's state for `iotsafe mqtt status`.
type Status struct {
	Address     string    `json:"address"`
	ClientID    string    `json:"client_id"`
	State       string    `json:"state"`
	Subscribed  bool      `json:"subscribed"` // the centre acknowledged the in rules' subscriptions
	Since       time.Time `json:"since"`
	LastError   string    `json:"last_error,omitempty"`
	Queued      int       `json:"queued"`
	QueuedBytes int64     `json:"queued_bytes"`
	Sent        int64     `json:"sent"`
	Delivered   int64     `json:"delivered"`
	Received    int64     `json:"received"`
	Refused     int64     `json:"refused"`
	Dropped     int64     `json:"dropped"`
	Reconnects  int64     `json:"reconnects"`
}

// Status reports the bridge's state and counters since the hub started.
func (b *Bridge) Status() Status {
	n, size := b.q.Len()
	b.mu.Lock()
	defer b.mu.Unlock()
	return Status{Address: b.cfg.Address, ClientID: b.cfg.ClientID, State: b.state, Subscribed: b.subscribed.Load(), Since: b.since, LastError: b.lastErr,
		Queued: n, QueuedBytes: size, Sent: b.sent.Load(), Delivered: b.delivered.Load(), Received: b.received.Load(),
		Refused: b.refused.Load(), Dropped: b.dropped0.Load() + b.q.Dropped(), Reconnects: b.reconnects.Load()}
}
