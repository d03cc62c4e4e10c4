package peerlink

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// Links are this hub's connections to its peers. Safe for concurrent use.
type Links struct {
	self   string     // this hub's name
	signer ssh.Signer // this hub's host key
	log    *slog.Logger
	// HandshakeTimeout bounds a connection's TCP connect and SSH handshake; 0 means 10s.
	HandshakeTimeout time.Duration

	mu     sync.Mutex
	conns  map[string]*link // by peer name
	closed bool
}

type link struct {
	peer registry.HubInfo
	conn ssh.Conn
	ch   <-chan struct{} // closed when conn ends
}

// New makes the links of hub self, which authenticates with signer.
func New(self string, signer ssh.Signer, log *slog.Logger) *Links {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Links{self: self, signer: signer, log: log, conns: map[string]*link{}}
}

// ErrNoPeerAddress means the peer hub published no address for peers.
var ErrNoPeerAddress = errors.New("peerlink: the hub takes no peer connections (no registry.peer_address)")

// Open opens one connection to device/alias through peer, which holds the device's
// session; origin is the local process that connected here. The channel's refusal
// carries the peer's reason.
func (l *Links) Open(peer registry.HubInfo, device, alias, originAddr string, originPort uint32) (ssh.Channel, error) {
	extra := ssh.Marshal(sshext.DeviceOpen{Device: device, Alias: alias, OriginAddr: originAddr, OriginPort: originPort})
	for attempt := 0; ; attempt++ {
		lk, err := l.link(peer)
		if err != nil {
			return nil, err
		}
		ch, reqs, err := sshext.OpenChannel(lk.conn, lk.ch, sshext.PeerChannel, extra)
		var oce *ssh.OpenChannelError
		if err == nil {
			go ssh.DiscardRequests(reqs)
			return ch, nil
		}
		if errors.As(err, &oce) || attempt > 0 {
			return nil, fmt.Errorf("peer hub %s: %w", peer.Name, err)
		}
		// The connection died under us (the peer restarted): once more, on a new one.
		l.drop(peer.Name, lk)
	}
}

// link returns the live connection to peer, making one if needed. A peer that
// published another address or key since is connected to again.
func (l *Links) link(peer registry.HubInfo) (*link, error) {
	if peer.Addr == "" {
		return nil, ErrNoPeerAddress
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, net.ErrClosed
	}
	lk := l.conns[peer.Name]
	l.mu.Unlock()
	if lk != nil {
		select {
		case <-lk.ch:
			l.drop(peer.Name, lk)
		default:
			if lk.peer.Peer == peer.Peer {
				return lk, nil
			}
			l.drop(peer.Name, lk)
		}
	}
	lk, err := l.dial(peer)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		lk.conn.Close()
		return nil, net.ErrClosed
	}
	if old := l.conns[peer.Name]; old != nil && old.peer.Peer == peer.Peer {
		lk.conn.Close() // another caller connected meanwhile: use one
		return old, nil
	}
	l.conns[peer.Name] = lk
	return lk, nil
}

func (l *Links) dial(peer registry.HubInfo) (*link, error) {
	want, _, _, _, err := ssh.ParseAuthorizedKey([]byte(peer.HostKey))
	if err != nil {
		return nil, fmt.Errorf("peer hub %s published no usable host key: %v", peer.Name, err)
	}
	timeout := l.HandshakeTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	tc, err := net.DialTimeout("tcp", peer.Addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("peer hub %s at %s: %w", peer.Name, peer.Addr, err)
	}
	cc := &ssh.ClientConfig{User: sshext.PeerUserPrefix + l.self, Auth: []ssh.AuthMethod{ssh.PublicKeys(l.signer)},
		HostKeyAlgorithms: []string{want.Type()}, ClientVersion: "SSH-2.0-iotsafe-peer"}
	pin := func(_ string, _ net.Addr, key ssh.PublicKey) error {
		if !bytes.Equal(key.Marshal(), want.Marshal()) {
			return fmt.Errorf("%w: peer hub %s presented %s, the registry says %s", agent.ErrHostKey, peer.Name, ssh.FingerprintSHA256(key), ssh.FingerprintSHA256(want))
		}
		return nil
	}
	conn, chans, reqs, err := agent.Handshake(tc, nil, peer.Addr, cc, pin, timeout)
	if err != nil {
		return nil, fmt.Errorf("peer hub %s at %s: %w", peer.Name, peer.Addr, err)
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans {
			nc.Reject(ssh.Prohibited, "a hub opens no channels to its peer")
		}
	}()
	done := make(chan struct{})
	go func() { conn.Wait(); close(done) }()
	l.log.Info("connected to peer hub", "peer_hub", peer.Name, "addr", peer.Addr)
	return &link{peer: peer, conn: conn, ch: done}, nil
}

func (l *Links) drop(name string, lk *link) {
	l.mu.Lock()
	if l.conns[name] == lk {
		delete(l.conns, name)
	}
	l.mu.Unlock()
	lk.conn.Close()
}

// Close ends every link.
func (l *Links) Close() {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[string]*link{}
	l.mu.Unlock()
	for _, lk := range conns {
		lk.conn.Close()
	}
}
