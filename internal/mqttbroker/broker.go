package mqttbroker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.etcd.io/bbolt"

	"github.com/iotsafe/iotsafe/internal/devicecert"
	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
	"github.com/iotsafe/iotsafe/internal/mqtttopic"
	"github.com/iotsafe/iotsafe/internal/netready"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
	"github.com/iotsafe/iotsafe/internal/throttle"
	"github.com/iotsafe/iotsafe/internal/tls13conn"
	"github.com/iotsafe/iotsafe/internal/transport"
)

// Store is where stored topics go: the telemetry store.
type Store interface {
	Append(ctx context.Context, items ...telemetry.Notification) ([]telemetry.Notification, error)
	// Admit spends a device's message budget for a publish that is not stored.
	Admit(device string, n, size int) error
	// Subscribe and SetDurableHook are the store's fan-out (fanout.go).
	Subscribe(ctx context.Context, fn func([]telemetry.Notification)) (wait func())
	SetDurableHook(fn telemetry.DurableHook)
}

// Auditor records refusals in the audit log.
type Auditor interface {
	AddEvent(ctx context.Context, e registry.Event) error
}

// Audit event kinds.
const (
	EventAuthRefused = "mqtt_auth_refused" // a CONNECT without a valid device identity
	EventACLRefused  = "mqtt_acl_refused"  // a publish or subscribe outside devices/NAME/
	EventNotStored   = "mqtt_not_stored"   // a message on a stored topic the store refused (delivered all the same)
)

// Listener IDs.
const (
	PlainListener = "plain"
	TLSListener   = "tls"
	// SessionListener takes the plain listener's connections that devices' SSH
	// sessions hand over in process (deviceconn): each carries its device's identity.
	SessionListener = "session"
)

// Broker is the running broker.
type Broker struct {
	cfg     Config
	dataDir string
	dir     *devicedir.Directory
	store   Store
	audit   Auditor
	log     *slog.Logger
	srv     *mqtt.Server
	gate    *throttle.LogGate
	clients sync.Map // *mqtt.Client -> identity
	counts  counts
	addrs   map[string]net.Addr
	session *deviceconn.Listener // beside the plain listener; nil without one
	guard   *loginGuard
	// gens are the devices' enrolments as the last Revalidate saw them: a name gone or
	// enrolled again since has its retained messages deleted.
	retainMu sync.Mutex
	gens     map[string]int64
	bridge   *mqttbridge.Bridge // nil without mqtt.bridge
	// sessions is the session store (nil without mqtt.persist): dropping a removed
	// device's session deletes its records there too.
	sessions *sessionStore
	// Violation, if set before Start, counts a device's refused topic as a violation of
	// its profile (on_violation applies) instead of an mqtt_acl_refused event.
	Violation func(device, detail, remote string)
	// Platform, if set before Start, lets platform apps log in as front-door accounts.
	Platform Platform
	// services is sshd's table the plain listener's in-process twin is in (Open); domain
	// is the front door's, the TLS listener's name for scan --hub.
	services *deviceconn.Services
	domain   string
	// unsubscribe ends the subscription to the store's commits; subscribed waits for it.
	unsubscribe context.CancelFunc
	subscribed  func()
}

// Platform is how platform apps (front-door accounts) log in on the TLS listener and
// what their grants let them read and publish.
type Platform = transport.Accounts

// AccountClientPrefix starts a platform app's client identifier (app:NAME or
// app:NAME/anything): a device name has no colon, so the two never meet.
const AccountClientPrefix = "app:"

// identity is who a connected client is: a device, or a platform app (account).
type identity struct {
	device    string
	account   string // set for a platform app; device is then ""
	stamp     string // the platform app's password stamp at login
	accountID int64
	gen       int64     // the device's incarnation: a removed and re-added name is another device
	since     time.Time // when it logged in
	// certSerial is the client certificate it logged in with ("" for a secret): a
	// newer certificate of the device retires it.
	certSerial string
	// refused counts the client's refused topics: past MaxRefusals it is disconnected,
	// so one connection cannot write violations without bound.
	refused *atomic.Int32
}

// FileName is the broker's session store in the data folder.
const FileName = "mqtt.db"

// readBuffer is the size of each client's read buffer.
const readBuffer = 512

// New builds the broker; Start binds and serves. dataDir holds its session store.
func New(cfg Config, dataDir string, dir *devicedir.Directory, store Store, audit Auditor, log *slog.Logger) *Broker {
	cfg.ApplyDefaults()
	return &Broker{cfg: cfg, dataDir: dataDir, dir: dir, store: store, audit: audit, log: log, gate: throttle.NewLogGate(time.Minute), addrs: map[string]net.Addr{}}
}

// Start binds the configured listeners and serves. tlsConfig is the TLS listener's
// (policy and certificate applied by the caller); nil when there is none.
func (b *Broker) Start(tlsConfig *tls.Config) error {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumClients = int64(b.cfg.MaxClients)
	caps.MaximumPacketSize = uint32(b.cfg.MaxPacket)
	caps.MaximumClientWritesPending = int32(b.cfg.MaxPending)
	// An ack carries its own properties, never those of the packet it answers (acks.go).
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	// mochi logs every client's end at WARN (a closed connection, a refused login the
	// hook already reported): only its errors reach the hub's log.
	// The inline client publishes what comes in from the centre (the bridge) and the
	// notifications that arrive other ways (publishNotifications).
	// A client's read buffer is kept for as long as it is connected: 512 bytes, not
	// mochi's 2 KiB, holds a typical packet, and a larger one is read past the buffer
	// straight into the packet (bufio reads large reads directly).
	b.srv = mqtt.New(&mqtt.Options{Capabilities: caps, Logger: slog.New(errorsOnly{b.log.Handler()}), InlineClient: true,
		ClientNetReadBufferSize: readBuffer})
	if err := b.srv.AddHook(&hook{b: b}, nil); err != nil {
		return err
	}
	if err := b.srv.AddHook(new(ackHook), nil); err != nil {
		return err
	}
	if b.cfg.persist() {
		// mochi's bbolt store: one file, fsync on every commit, created 0600.
		path := filepath.Join(b.dataDir, FileName)
		st := newSessionStore()
		if err := b.srv.AddHook(st, &bolt.Options{Path: path, Options: &bbolt.Options{Timeout: 5 * time.Second}}); err != nil {
			return fmt.Errorf("mqtt: session store %s: %w", path, err)
		}
		b.sessions = &st
	}
	type lc struct {
		id, addr string
		tls      *tls.Config
	}
	var want []lc
	if b.cfg.Listen != "" {
		want = append(want, lc{PlainListener, b.cfg.Listen, nil})
	}
	if b.cfg.TLSListen != "" {
		if tlsConfig == nil {
			return errors.New("mqtt: the TLS listener has no TLS configuration")
		}
		want = append(want, lc{TLSListener, b.cfg.TLSListen, tlsConfig})
	}
	b.guard = newLoginGuard(b.cfg, b.log)
	ready, err := netready.Default()
	if err != nil {
		b.log.Warn("mqtt: every client keeps a goroutine while connected", "err", err)
		ready = nil
	}
	for _, l := range want {
		// Bind here so a taken port fails the hub's start with its name, and port 0
		// yields the address the hub prints.
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("mqtt: %s listener %s: %w", l.id, l.addr, err)
		}
		b.addrs[l.id] = ln.Addr()
		gl := &guardedListener{id: l.id, ln: ln, guard: b.guard, log: b.log, srv: b.srv, ready: ready}
		if l.tls != nil {
			gl.tls = tls13conn.NewServer(l.tls)
		}
		if err := b.srv.AddListener(gl); err != nil {
			ln.Close()
			return err
		}
		if l.id == PlainListener {
			b.session = deviceconn.NewListener(ln.Addr())
			if err := b.srv.AddListener(&guardedListener{id: SessionListener, ln: b.session, guard: b.guard, log: b.log, srv: b.srv}); err != nil {
				return err
			}
		}
	}
	if b.cfg.Bridge != nil {
		// Before Serve: the hook hands devices' messages to it from the first one.
		br, err := mqttbridge.New(*b.cfg.Bridge, filepath.Join(b.dataDir, mqttbridge.QueueFile), local{b.srv}, b.log.With("part", "bridge"))
		if err != nil {
			return err
		}
		b.bridge = br
	}
	if err := b.srv.Serve(); err != nil {
		return err
	}
	b.joinFanout()
	// Retained messages restored from the session store of devices removed meanwhile.
	b.clearRetainedOfGone(b.dir.Load())
	if b.bridge != nil {
		b.bridge.Start()
	}
	return nil
}

// local is the site side of the bridge: mochi's inline client, which publishes without
// an ACL check (what comes in is the operator's rules' choice) and is no device, so what
// it publishes is neither stored nor bridged back out.
type local struct{ srv *mqtt.Server }

func (l local) Publish(topic string, payload []byte, retain bool, qos byte) error {
	return l.srv.Publish(topic, payload, retain, qos)
}

// Bridge is the running bridge, or nil.
func (b *Broker) Bridge() *mqttbridge.Bridge { return b.bridge }

// Session is the listener devices' SSH sessions hand their direct forwards to the plain
// listener over (the hub adds it to sshd's Services); nil without a plain listener.
func (b *Broker) Session() *deviceconn.Listener { return b.session }

// Addr is where a listener (PlainListener, TLSListener) listens; nil if it is off.
func (b *Broker) Addr(id string) net.Addr { return b.addrs[id] }

// Close disconnects every client and stops.
func (b *Broker) Close() error {
	if b.srv == nil {
		return nil
	}
	if b.services != nil && b.session != nil {
		b.services.Remove(b.session)
	}
	b.leaveFanout()
	var berr error
	if b.bridge != nil {
		berr = b.bridge.Close()
	}
	return errors.Join(b.srv.Close(), berr)
}

// Revalidate disconnects clients whose device is revoked, removed or replaced, or whose
// platform app's account is removed, and drops the persistent sessions of such devices
// (nothing may reach them any more): the hub calls it after every reload of the
// directory.
func (b *Broker) Revalidate() int {
	if b.srv == nil {
		return 0
	}
	snap := b.dir.Load()
	n := 0
	for _, cl := range b.srv.Clients.GetAll() {
		v, ok := b.clients.Load(cl)
		if !ok {
			// An away persistent session (or one restored after a restart).
			if !cl.Net.Inline && cl.Closed() && !b.inGoodStanding(cl.ID) {
				b.dropSession(cl)
			}
			continue
		}
		id := v.(identity)
		if id.account != "" {
			// Its grants are checked message by message; a removed account goes, and so
			// does a client that logged in with a password changed since.
			if b.Platform == nil {
				continue
			}
			why := ""
			switch cur, ok := b.Platform.AccountStamp(id.accountID); {
			case !ok:
				why = "account removed"
			case cur != id.stamp:
				why = "password changed"
			}
			if why != "" {
				b.log.Info("disconnecting a platform app's MQTT client", "account", id.account, "client", cl.ID, "why", why)
				b.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
				n++
			}
			continue
		}
		st, known := snap.Device(id.device)
		certOK := id.certSerial == "" || snap.CurrentCert(id.device, id.certSerial)
		if known && !st.Revoked && st.Gen() == id.gen && certOK {
			continue
		}
		why := "removed"
		switch {
		case known && st.Revoked:
			why = "revoked"
		case known && st.Gen() == id.gen && !certOK:
			why = "certificate replaced"
		}
		b.log.Info("disconnecting a device's MQTT client", "device", id.device, "client", cl.ID, "why", why)
		b.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
		n++
	}
	b.clearRetainedOfGone(snap)
	return n
}

// clearRetainedOfGone deletes the retained messages under devices/NAME/ of every device
// removed (or enrolled again: another device) since the last call, so a device enrolled
// later under the name starts with none. The first call, at start, clears those of
// devices the registry no longer has.
func (b *Broker) clearRetainedOfGone(snap *devicedir.Snapshot) {
	b.retainMu.Lock()
	defer b.retainMu.Unlock()
	gens := make(map[string]int64, len(snap.Names()))
	for _, name := range snap.Names() {
		st, _ := snap.Device(name)
		gens[name] = st.Gen()
	}
	var gone []string
	if b.gens == nil {
		for _, pk := range b.srv.Topics.Messages("devices/+/#") {
			if device := strings.SplitN(pk.TopicName, "/", 3)[1]; gens[device] == 0 && !slices.Contains(gone, device) {
				gone = append(gone, device)
			}
		}
	}
	for name, gen := range b.gens {
		if gens[name] != gen {
			gone = append(gone, name)
		}
	}
	b.gens = gens
	for _, device := range gone {
		b.clearRetained(device)
	}
}

// clearRetained deletes the retained messages under devices/DEVICE/.
func (b *Broker) clearRetained(device string) {
	n := 0
	for _, pk := range b.srv.Topics.Messages("devices/" + device + "/#") {
		// An empty retained publish deletes it, in memory and in the session store.
		if err := b.srv.Publish(pk.TopicName, nil, true, 0); err == nil {
			n++
		}
	}
	if n > 0 {
		b.log.Info("deleted the retained messages of a removed device", "device", device, "messages", n)
	}
}

// ForgetDevices drops what the broker keeps of devices removed while it did not run
// (restored from its session store at start): their away sessions and their retained
// messages. The devices' names may be enrolled again since: what is dropped is the old
// enrolment's, which no client of the new one has taken over yet.
func (b *Broker) ForgetDevices(names []string) {
	if b.srv == nil || len(names) == 0 {
		return
	}
	gone := map[string]bool{}
	for _, n := range names {
		gone[n] = true
	}
	for _, cl := range b.srv.Clients.GetAll() {
		device, _, _ := strings.Cut(cl.ID, "/")
		if _, connected := b.clients.Load(cl); gone[device] && !connected && !cl.Net.Inline {
			b.dropSession(cl)
		}
	}
	for name := range gone {
		b.clearRetained(name)
	}
}

// inGoodStanding reports whether the device a client identifier names (NAME or
// NAME/...) is enrolled and not revoked.
func (b *Broker) inGoodStanding(clientID string) bool {
	device, _, _ := strings.Cut(clientID, "/")
	st, known := b.dir.Load().Device(device)
	return known && !st.Revoked
}

// dropSession deletes a persistent session whose client is away: its subscriptions, its
// in-flight and waiting messages, and its records in the session store.
func (b *Broker) dropSession(cl *mqtt.Client) {
	if cur, ok := b.srv.Clients.Get(cl.ID); !ok || cur != cl || cl.IsTakenOver() {
		return // not the session the broker holds under that identifier
	}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if cl.State.Inflight.Delete(pk.PacketID) {
			atomic.AddInt64(&b.srv.Info.Inflight, -1)
		}
		if b.sessions != nil {
			b.sessions.OnQosDropped(cl, pk)
		}
	}
	b.srv.UnsubscribeClient(cl)
	if b.sessions != nil {
		b.sessions.OnClientExpired(cl)
	}
	b.srv.Clients.Delete(cl.ID)
	b.log.Info("dropped the MQTT session of a removed or revoked device", "client", cl.ID)
}

// refuse logs and audits a refusal, once a minute per device, kind and reason.
func (b *Broker) refuse(kind, device, remote, detail string) {
	if ok, n := b.gate.Allow(kind + "|" + device + "|" + remote + "|" + detail); !ok {
		return
	} else if n > 0 {
		detail = fmt.Sprintf("%s (and %d more like it in the last minute)", detail, n)
	}
	b.log.Warn("mqtt refused", "kind", kind, "device", device, "remote", remote, "detail", detail)
	if b.audit != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.audit.AddEvent(ctx, registry.Event{Kind: kind, Device: device, Remote: remote, Detail: detail}); err != nil {
			b.log.Error("recording an MQTT refusal failed", "err", err)
		}
	}
}

// authenticate finds the device a CONNECT comes from, or why it is refused; breach
// marks a refusal of a known device breaking its rules (a violation of its profile).
func (b *Broker) authenticate(cl *mqtt.Client, pk packets.Packet) (id identity, why string, breach bool) {
	snap := b.dir.Load()
	user := string(pk.Connect.Username)
	var st registry.DeviceState
	var certSerial string
	switch cl.Net.Listener {
	case PlainListener, SessionListener:
		var why string
		if st, why = provenDevice(snap, cl); why != "" {
			return identity{}, why, false
		}
		if user != "" && user != st.Name {
			return identity{}, fmt.Sprintf("user name %q is not this device's (%s)", user, st.Name), false
		}
	case TLSListener:
		if name, gen, serial, ok := certIdentity(cl); ok {
			// A device certificate the hub's CA issued (the handshake verified it): the
			// device's incarnation must still be the one it was issued for, and the
			// certificate the last one issued to it.
			var known bool
			if st, known = snap.Device(name); !known || st.Gen() != gen {
				return identity{}, fmt.Sprintf("the client certificate of %s is for a device that no longer exists (removed, or enrolled again)", name), false
			}
			if !snap.CurrentCert(name, serial) {
				return identity{}, fmt.Sprintf("the client certificate %s of %s was replaced by a newer one (iotsafe device cert)", serial, name), false
			}
			if user != "" && user != name {
				return identity{}, fmt.Sprintf("user name %q is not the certificate's device (%s)", user, name), false
			}
			certSerial = serial
			break
		}
		if user == "" {
			return identity{}, "no user name: log in with the device's name and telemetry secret, or its client certificate", false
		}
		var res devicedir.SecretResult
		st, res = snap.CheckSecret(user, string(pk.Connect.Password))
		if res == devicedir.NoSecret && b.Platform != nil {
			return b.authenticateAccount(cl, pk)
		}
		if res != devicedir.SecretOK {
			return identity{}, "wrong user name or password", false
		}
	default:
		return identity{}, "unknown listener", false
	}
	if st.Revoked {
		return identity{}, fmt.Sprintf("device %s is revoked", st.Name), false
	}
	if pk.Connect.ClientIdentifier == "" && !pk.Connect.Clean {
		return identity{}, "a persistent session needs a client identifier: the device's name, or NAME/anything", false
	}
	if cid := pk.Connect.ClientIdentifier; cid != "" && cid != st.Name && !strings.HasPrefix(cid, st.Name+"/") {
		return identity{device: st.Name}, fmt.Sprintf("client identifier %q: a device's is its name, or NAME/anything", cid), true
	}
	// The broker publishes a will without asking the ACL: check its topic here.
	if pk.Connect.WillFlag && !allowed(st.Name, pk.Connect.WillTopic) {
		return identity{device: st.Name}, fmt.Sprintf("will topic %q is outside devices/%s/", pk.Connect.WillTopic, st.Name), true
	}
	return identity{device: st.Name, gen: st.Gen(), certSerial: certSerial, refused: new(atomic.Int32)}, "", false
}

// provenDevice is the device a plain connection proves: the SSH session that handed it
// over, or, for a TCP connection the hub itself opened, the pool address it comes from.
// Another local user bound to a pool address proves nothing.
func provenDevice(snap *devicedir.Snapshot, cl *mqtt.Client) (registry.DeviceState, string) {
	if id, ok := deviceconn.Of(rawConn(cl.Net.Conn)); ok {
		st, known := snap.Device(id.Device)
		if !known || st.Gen() != id.Gen {
			return st, fmt.Sprintf("device %s was removed or enrolled again since its session began", id.Device)
		}
		return st, ""
	}
	const sessionOnly = "the plain listener serves devices over their SSH session only"
	ap, err := netip.ParseAddrPort(cl.Net.Remote)
	if err != nil || !deviceconn.FromHub(rawConn(cl.Net.Conn)) {
		return registry.DeviceState{}, sessionOnly + " (this connection is not one the hub opened)"
	}
	st, ok := snap.ByAddress(ap.Addr())
	if !ok {
		return st, sessionOnly + " (the source is no device's pool address)"
	}
	return st, ""
}

// tlsState is a TLS connection: a *tls.Conn (TLS 1.2) or a *tls13conn.Conn.
type tlsState interface{ ConnectionState() tls.ConnectionState }

// certIdentity reads the device of a verified client certificate, if the client gave
// one, and the certificate's serial number (decimal).
func certIdentity(cl *mqtt.Client) (name string, gen int64, serial string, ok bool) {
	tc, isTLS := rawConn(cl.Net.Conn).(tlsState)
	if !isTLS {
		return "", 0, "", false
	}
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", 0, "", false
	}
	leaf := cs.PeerCertificates[0]
	name, gen, ok = devicecert.Identity(leaf)
	return name, gen, leaf.SerialNumber.String(), ok
}

// authenticateAccount logs a platform app in with its front-door account. Its session
// is clean: what it missed is the REST API's to give (history, poll, stream).
func (b *Broker) authenticateAccount(cl *mqtt.Client, pk packets.Packet) (identity, string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ip, _, _ := net.SplitHostPort(cl.Net.Remote)
	id, name, stamp, err := b.Platform.CheckPassword(ctx, ip, string(pk.Connect.Username), string(pk.Connect.Password))
	if err != nil {
		return identity{}, "wrong user name or password", false
	}
	if !pk.Connect.Clean {
		return identity{}, fmt.Sprintf("account %s: a platform app's session is clean (read what it missed from the REST API)", name), false
	}
	if cid := pk.Connect.ClientIdentifier; cid != "" && cid != AccountClientPrefix+name && !strings.HasPrefix(cid, AccountClientPrefix+name+"/") {
		return identity{}, fmt.Sprintf("client identifier %q: a platform app's is %s%s or %s%s/anything", cid, AccountClientPrefix, name, AccountClientPrefix, name), false
	}
	if pk.Connect.WillFlag {
		return identity{}, fmt.Sprintf("account %s: a platform app has no will", name), false
	}
	return identity{account: name, accountID: id, stamp: stamp, refused: new(atomic.Int32)}, "", false
}

// accountMay reports whether a platform app may use topic (a name or a filter): under
// devices/, reading devices it holds +telemetry on (a wildcard in the device's level is
// a subscription filtered message by message), publishing commands to devices it holds
// +command (or +manage) on.
func (b *Broker) accountMay(id identity, topic string, write bool) bool {
	levels := strings.SplitN(topic, "/", 3)
	if len(levels) < 2 || levels[0] != "devices" || levels[1] == "" {
		return false
	}
	device := levels[1]
	if device == "+" || device == "#" {
		return !write
	}
	// Only the device writes its notifications (and the rest of its tree): a platform
	// app publishes commands, devices/NAME/commands[/...], and nothing else.
	if write && (len(levels) < 3 || (levels[2] != "commands" && !strings.HasPrefix(levels[2], "commands/"))) {
		return false
	}
	right := registry.RightTelemetry
	if write {
		right = registry.RightCommand // or +manage, which includes it
	}
	return b.Platform.AllowedAccount(id.accountID, device, right)
}

// subscribedTo reports whether one of the client's subscriptions matches topic: an ACL
// check of a topic so covered is the delivery of a message, not a subscription.
func (b *Broker) subscribedTo(cl *mqtt.Client, topic string) bool {
	for filter := range cl.State.Subscriptions.GetAll() {
		filter, _, _ = mqtttopic.Unshare(filter)
		if mqtttopic.Match(filter, topic) {
			return true
		}
	}
	return false
}

// allowed reports whether a device may use topic (a name or a filter): devices/NAME and
// below only.
func allowed(device, topic string) bool {
	own := "devices/" + device
	return topic == own || strings.HasPrefix(topic, own+"/")
}

// notification maps a published message to a stored notification.
func notification(device, topic string, payload []byte) telemetry.Notification {
	name := strings.TrimPrefix(topic, "devices/"+device+"/notifications/")
	if name == topic {
		name = topic[strings.LastIndexByte(topic, '/')+1:]
	}
	n := telemetry.Notification{Device: device, Name: name, Via: Via}
	switch {
	case len(payload) == 0:
	case json.Valid(payload):
		n.Parameters = json.RawMessage(append([]byte(nil), payload...))
	case utf8.Valid(payload):
		n.Parameters, _ = json.Marshal(map[string]string{"payload": string(payload)})
	default:
		n.Parameters, _ = json.Marshal(map[string][]byte{"payload_base64": payload})
	}
	return n
}

// notBridged counts a message the bridge's queue refused and says so, once a minute
// per kind of error.
func (b *Broker) notBridged(err error, msg string, attrs ...any) {
	b.counts.notBridged.Add(1)
	if ok, more := b.gate.Allow("bridge|" + err.Error()); ok {
		b.log.Warn(msg, append(attrs, "err", err, "more_not_logged", more)...)
	}
}

// errorsOnly passes a handler's ERROR records only.
type errorsOnly struct{ slog.Handler }

func (e errorsOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError && e.Handler.Enabled(ctx, l)
}

// Handle drops mochi's "publish packet error": it is how mochi reports a hook's refusal
// (a device over its budget), at ERROR with the whole packet, payload included, once per
// message; the hook audits the refusal itself, once a minute per device.
func (e errorsOnly) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "publish packet error" {
		return nil
	}
	return e.Handler.Handle(ctx, r)
}

func (e errorsOnly) WithAttrs(a []slog.Attr) slog.Handler { return errorsOnly{e.Handler.WithAttrs(a)} }
func (e errorsOnly) WithGroup(n string) slog.Handler      { return errorsOnly{e.Handler.WithGroup(n)} }
