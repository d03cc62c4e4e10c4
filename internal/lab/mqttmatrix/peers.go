package mqttmatrix

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/lab/mqttload"
	"github.com/iotsafe/iotsafe/internal/linkemu"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/tlspolicy"
)

// peers starts the brokers of the matrix on the current link.
type peers struct {
	b       *lab.Bench
	o       Options
	secrets map[string]string // devK -> its secret: the hub's registry and Mosquitto's password file
	certs   map[bool]certFiles
	hub     *lab.LabHub
	plain   int // port of the hub's plain listener, the target of the profile's alias "broker"
	pair    *lab.LinkPair
}

type certFiles struct {
	cert, key string
	trust     *tls.Config
}

// target is where a started broker takes the load.
type target struct {
	addr     string
	dial     func(context.Context, string) (net.Conn, error)
	tls      *tls.Config
	identity func(i int) mqttload.Identity
}

// Ports inside a link's namespaces, where every port is free.
const (
	nsMQTT    = 8883
	nsSSH     = 2222
	nsForward = 18830
)

func newPeers(ctx context.Context, b *lab.Bench, o Options) (*peers, error) {
	e := &peers{b: b, o: o, secrets: map[string]string{}, certs: map[bool]certFiles{}}
	dir, err := b.Scratch("mqtt-certs")
	if err != nil {
		return nil, err
	}
	for _, rsa := range []bool{false, true} {
		name := map[bool]string{false: "ecdsa", true: "rsa"}[rsa]
		c, k, trust, err := lab.WriteServerCert(dir, name, rsa)
		if err != nil {
			return nil, err
		}
		e.certs[rsa] = certFiles{c, k, trust}
	}
	if e.plain, err = lab.StablePort(); err != nil { // every start of the hub listens on it
		return nil, err
	}
	// One registry for every start of the hub: devices dev0..devN-1 with secrets, and
	// the lab profile's alias to the plain listener for the SSH path.
	e.hub, err = b.EnrollIoTsafe(ctx, "mqtt-hub", lab.IoTsafeOpts{Sessions: o.Clients,
		Direct:  map[string]string{"broker": "127.0.0.1:" + strconv.Itoa(e.plain)},
		Secrets: func(n, s string) { e.secrets[n] = s }})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// useLink sets up link (the emulator's namespaces) or loopback.
func (e *peers) useLink(link string) error {
	if e.pair != nil {
		e.pair.Close()
		e.pair = nil
	}
	if link == Loopback {
		return nil
	}
	prof, err := linkemu.Lookup(link)
	if err != nil {
		return err
	}
	e.pair, err = lab.NewLinkPair(prof, "link", nil)
	return err
}

func (e *peers) close() {
	if e.pair != nil {
		e.pair.Close()
	}
}

// deviceIdentity: client i is device devI with its secret, publishing under its topics.
func (e *peers) deviceIdentity(i int) mqttload.Identity {
	n := fmt.Sprintf("dev%d", i)
	return mqttload.Identity{ClientID: n, Username: n, Password: []byte(e.secrets[n]), Topic: "devices/" + n + "/bench"}
}

// listen is the host a broker listens on for the current link, and how the load reaches it.
func (e *peers) listen() (host string, dial func(context.Context, string) (net.Conn, error)) {
	if e.pair == nil {
		return "127.0.0.1", nil
	}
	in := e.pair.DialIn(e.pair.Dev)
	return lab.LinkGWAddr, func(_ context.Context, addr string) (net.Conn, error) { return in(addr) }
}

// start starts g's broker and returns where the load goes and how to stop it.
func (e *peers) start(ctx context.Context, g group) (target, func(), error) {
	var t target
	var stop func()
	var err error
	switch g.broker {
	case Mosquitto, Plain:
		t, stop, err = e.startMosquitto(ctx, g)
	case Hub:
		t, stop, err = e.startHub(ctx, g)
	case SSH:
		t, stop, err = e.startSSHPath(ctx)
	}
	if err != nil {
		return t, nil, err
	}
	// One message first: the SSH session comes up, the broker's caches warm, and a
	// broker that refuses the lab's clients fails here with its reason.
	warm := mqttload.Options{Addr: t.addr, Dial: t.dial, Clients: 1, Messages: 1, QoS: 1, Identity: t.identity, Timeout: 30 * time.Second}
	if len(g.tls) > 0 {
		if warm.TLS, err = clientTLS(t.tls, g.tls[0]); err != nil {
			stop()
			return t, nil, err
		}
	}
	r, err := mqttload.Run(ctx, warm)
	if err == nil && r.Totals.Successes != 1 {
		err = fmt.Errorf("first message refused: %v", r.Errors)
	}
	if err != nil {
		stop()
		return t, nil, err
	}
	return t, stop, nil
}

func (e *peers) startMosquitto(ctx context.Context, g group) (target, func(), error) {
	dir, err := e.b.Scratch("mosquitto")
	if err != nil {
		return target{}, nil, err
	}
	host, dial := e.listen()
	mo := lab.MosquittoOpts{Host: host, Users: e.secrets, NoDelay: e.o.MosquittoNoDelay}
	if e.pair != nil {
		mo.Netns, mo.Port = e.pair.GW, nsMQTT
	}
	c := e.certs[g.rsa]
	if g.broker == Mosquitto {
		mo.CertFile, mo.KeyFile = c.cert, c.key
		if g.only13 != "" {
			mo.TLSVersion, mo.Ciphers13 = "tlsv1.3", g.only13
		} else {
			var names []string
			for _, tc := range g.tls {
				names = append(names, tc.s.Name)
			}
			mo.Ciphers = strings.Join(names, ":")
		}
	}
	m, err := lab.StartMosquitto(ctx, dir, mo)
	if err != nil {
		return target{}, nil, err
	}
	return target{addr: m.Addr, dial: dial, tls: c.trust, identity: e.deviceIdentity}, m.Stop, nil
}

// hubOpts is how the hub starts on the current link, with its MQTT section.
func (e *peers) hubOpts(mqtt func(*mqttbroker.Config)) lab.IoTsafeOpts {
	o := lab.IoTsafeOpts{Sessions: e.o.Clients, Configure: func(c *hub.Config) { mqtt(&c.MQTT) }}
	if e.pair != nil {
		o.Netns = &lab.Netns{Name: e.pair.GW}
		o.SSHListen = net.JoinHostPort(lab.LinkGWAddr, strconv.Itoa(nsSSH))
	}
	return o
}

func (e *peers) startHub(ctx context.Context, g group) (target, func(), error) {
	host, dial := e.listen()
	port := 0
	if e.pair != nil {
		port = nsMQTT
	}
	var suites []string
	for _, tc := range g.tls {
		if !tc.s.TLS13 {
			suites = append(suites, tc.s.Name)
		}
	}
	c := e.certs[g.rsa]
	// The lab names suites an operator would need allow_insecure for (CBC, RSA key
	// exchange): the hub warns at start, as it should.
	srv, err := e.b.StartEnrolled(ctx, e.hub, e.hubOpts(func(m *mqttbroker.Config) {
		m.TLSListen, m.Cert, m.Key = net.JoinHostPort(host, strconv.Itoa(port)), c.cert, c.key
		m.TLS = tlspolicy.Policy{MinVersion: "1.2", MaxVersion: "1.3", Suites: suites, AllowInsecure: true}
	}))
	if err != nil {
		return target{}, nil, err
	}
	if srv.MQTTTLS == "" {
		srv.Proc.Stop()
		return target{}, nil, fmt.Errorf("the hub names no MQTT TLS listener")
	}
	return target{addr: srv.MQTTTLS, dial: dial, tls: c.trust, identity: e.deviceIdentity}, srv.Proc.Stop, nil
}

// startSSHPath starts the hub with its plain listener and dev0's agent forwarding a
// local port to it: every client is dev0 (the hub knows it by its pool address), with
// client identifiers dev0/I.
func (e *peers) startSSHPath(ctx context.Context) (target, func(), error) {
	srv, err := e.b.StartEnrolled(ctx, e.hub, e.hubOpts(func(m *mqttbroker.Config) {
		m.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(e.plain))
	}))
	if err != nil {
		return target{}, nil, err
	}
	fwd := nsForward
	if e.pair == nil {
		if fwd, err = lab.FreePort(); err != nil {
			srv.Proc.Stop()
			return target{}, nil, err
		}
	}
	local := "127.0.0.1:" + strconv.Itoa(fwd)
	argv := []string{e.b.Bin, "agent", "--hub", srv.Addr, "--key", filepath.Join(e.hub.Keys, "dev0"),
		"--hub-key", ssh.FingerprintSHA256(srv.HostKey), "--forward", local + "=broker"}
	dialLocal := func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 10*time.Second) }
	var dial func(context.Context, string) (net.Conn, error)
	if e.pair != nil {
		argv = append([]string{"ip", "netns", "exec", e.pair.Dev}, argv...)
		dialLocal = e.pair.DialIn(e.pair.Dev)
		dial = func(_ context.Context, addr string) (net.Conn, error) { return dialLocal(addr) }
	}
	agent, err := lab.StartProc("mqtt-agent", nil, argv...)
	if err != nil {
		srv.Proc.Stop()
		return target{}, nil, err
	}
	stop := func() { agent.Stop(); srv.Proc.Stop() }
	if err := lab.WaitTCPWith(ctx, agent, local, dialLocal); err != nil {
		stop()
		return target{}, nil, err
	}
	ident := func(i int) mqttload.Identity {
		return mqttload.Identity{ClientID: fmt.Sprintf("dev0/%d", i), Topic: "devices/dev0/bench"}
	}
	return target{addr: local, dial: dial, identity: ident}, stop, nil
}
