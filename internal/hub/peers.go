package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/peerlink"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshd"
	"github.com/iotsafe/iotsafe/internal/tunnel"
)

// Hubs sharing a PostgreSQL registry reach each other's devices: this hub admits the
// others as peers (each by the host key it published with its lease), and with shared
// listeners it answers on every pool address: a connection to a socket of a device
// another live hub holds is authorised here, as for its own devices, and carried to
// that hub over one SSH link per peer (package peerlink). Platform processes on any hub
// cannot tell where a device's session is.

// liveTTL is how long the list of live hubs is trusted before it is read again.
const liveTTL = 2 * time.Second

type liveHubs struct {
	at   time.Time
	hubs map[string]registry.HubInfo
}

// startPeers sets up both sides of the peer links.
func (h *Hub) startPeers(ctx context.Context, sc *sshd.Config) {
	sc.PeerHub = h.checkPeerHub
	if h.shared == nil {
		return // no shared listeners: this hub's sockets serve its own devices only
	}
	h.peers = peerlink.New(h.reg.Hub(), h.hostKeys[0], h.log.With("component", "peers"))
	h.shared.SetFallback(h.relayToPeer)
	go h.holdPorts(ctx, 10*time.Second)
}

// live is the registry's live hubs, read at most every liveTTL.
func (h *Hub) live(ctx context.Context) (map[string]registry.HubInfo, error) {
	if c := h.liveCache.Load(); c != nil && time.Since(c.at) < liveTTL {
		return c.hubs, nil
	}
	hubs, err := h.reg.LiveHubs(ctx)
	if err != nil {
		return nil, err
	}
	h.liveCache.Store(&liveHubs{at: time.Now(), hubs: hubs})
	return hubs, nil
}

// onPeer reports whether another live hub this hub relays to holds device's session
// (the front door serves such a device as one of its own).
func (h *Hub) onPeer(device string) bool {
	if h.peers == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	at, err := h.reg.SessionHub(ctx, device)
	if err != nil || at == "" || at == h.reg.Hub() {
		return false
	}
	hubs, err := h.live(ctx)
	if err != nil {
		return false
	}
	_, ok := hubs[at]
	return ok
}

// checkPeerHub admits hub name if key is the host key it published with a live lease.
func (h *Hub) checkPeerHub(name string, key ssh.PublicKey) error {
	if name == h.reg.Hub() {
		return errors.New("that is this hub's own name")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hubs, err := h.reg.LiveHubs(ctx) // not the cache: admission is rare and must be current
	if err != nil {
		return err
	}
	info, ok := hubs[name]
	if !ok {
		return errors.New("no live hub of that name in the registry")
	}
	want, _, _, _, err := ssh.ParseAuthorizedKey([]byte(info.HostKey))
	if err != nil {
		return fmt.Errorf("it published no usable host key: %v", err)
	}
	if !bytes.Equal(want.Marshal(), key.Marshal()) {
		return errors.New("not the host key it published")
	}
	return nil
}

// relayToPeer takes a connection to a pool address no socket of this hub serves: if the
// socket's device is held by another live hub, the connection is authorised here and
// carried there. It returns false (the connection is reset) otherwise.
func (h *Hub) relayToPeer(c net.Conn) bool {
	la, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	dest := la.AddrPort()
	if h.relayMisses.recent(dest) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	device, alias, at, err := h.reg.SocketAt(ctx, dest)
	if err != nil || at == "" || at == h.reg.Hub() {
		h.relayMisses.add(dest)
		return false
	}
	hubs, err := h.live(ctx)
	if err != nil {
		h.log.Warn("cannot read the registry's hubs; refusing a connection to another hub's device", "device", device, "err", err)
		return false
	}
	peer, ok := hubs[at]
	if !ok {
		h.relayMisses.add(dest)
		return false // its hub is gone: the device is offline until it reconnects
	}
	if check := h.access.ConnectionCheck(); check != nil {
		if err := check(c, device, alias); err != nil {
			h.log.Info("local connection refused", "device", device, "alias", alias, "from", c.RemoteAddr().String(), "err", err)
			c.Close()
			return true
		}
	}
	var originAddr string
	var originPort uint32
	if o, _ := c.RemoteAddr().(*net.TCPAddr); o != nil {
		originAddr, originPort = o.IP.String(), uint32(o.Port)
	}
	ch, err := h.peers.Open(peer, device, alias, originAddr, originPort)
	if err != nil {
		h.log.Warn("cannot reach a device through its hub", "event", "peer_refused", "device", device, "alias", alias, "peer_hub", at, "err", err)
		c.Close()
		return true
	}
	h.log.Debug("connection relayed to a peer hub", "event", "peer_relay", "device", device, "alias", alias, "peer_hub", at)
	tunnel.Pipe(ch, c, nil)
	return true
}

// holdPorts keeps every port of the registry's sockets listening here, so connections
// to devices of other hubs arrive at all: at start, after each registry change that may
// add sockets (portsChanged) and every so often.
func (h *Hub) holdPorts(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	v6 := h.reg.Pool().Prefix().Addr().Is6()
	held := -1
	for {
		qctx, cancel := context.WithTimeout(ctx, every)
		ports, err := h.reg.SocketPorts(qctx)
		cancel()
		if err == nil {
			err = h.shared.Hold(ports, v6)
		}
		if err != nil && ctx.Err() == nil {
			h.log.Warn("cannot listen on every pool port for the devices of other hubs", "err", err)
		} else if len(ports) != held {
			held = len(ports)
			h.log.Debug("pool ports held for the devices of other hubs", "event", "ports_held", "ports", held)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.portsChanged:
		}
	}
}

// kickPorts asks holdPorts to read the registry's ports again.
func (h *Hub) kickPorts() {
	select {
	case h.portsChanged <- struct{}{}:
	default:
	}
}

// missCache remembers for a second the addresses no live peer serves, so a local
// process connecting to an offline device in a loop costs the shared registry one query
// a second, not one per connection.
type missCache struct {
	mu sync.Mutex
	m  map[netip.AddrPort]time.Time
}

const (
	missFor  = time.Second
	missMost = 65536
)

func (mc *missCache) recent(a netip.AddrPort) bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	at, ok := mc.m[a]
	return ok && time.Since(at) < missFor
}

func (mc *missCache) add(a netip.AddrPort) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.m == nil || len(mc.m) >= missMost {
		mc.m = map[netip.AddrPort]time.Time{} // bounded: start over rather than grow
	}
	mc.m[a] = time.Now()
}
