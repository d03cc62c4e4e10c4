package sshd

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/peerlink"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// Both ends of the link between hubs of a shared registry (package peerlink to this
// server): a peer admitted by the key it published reaches a device served here; a
// device not served here is refused with the reason; a stranger's key under a hub's
// name is refused; a server presenting another host key than the one published is
// refused by the caller; and a peer may open nothing but peer channels.
func TestPeerHub(t *testing.T) {
	peerKey := signer(t)
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), func(c *Config) {
		c.PeerHub = func(name string, key ssh.PublicKey) error {
			if name == "edge-b" && bytes.Equal(key.Marshal(), peerKey.PublicKey().Marshal()) {
				return nil
			}
			return errors.New("not a hub of this registry")
		}
	})
	// dev1 serves "http": every connection it gets is echoed back.
	conn, chans, reqs := f.dial(t)
	go ssh.DiscardRequests(reqs)
	if ok, _, err := conn.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"http", 0})); err != nil || !ok {
		t.Fatalf("reverse forward: %v %v", ok, err)
	}
	go func() {
		for nc := range chans {
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(creqs)
			go func() {
				io.Copy(ch, ch)
				ch.CloseWrite()
			}()
		}
	}()
	peer := registry.HubInfo{Name: "edge-a", Peer: registry.Peer{Addr: f.addr, HostKey: string(ssh.MarshalAuthorizedKey(f.host))}}

	links := peerlink.New("edge-b", peerKey, nil)
	defer links.Close()
	ch, err := links.Open(peer, "dev1", "http", "127.0.0.1", 5555)
	if err != nil {
		t.Fatal(err)
	}
	ch.Write([]byte("through the peer"))
	ch.CloseWrite()
	if got, _ := io.ReadAll(ch); string(got) != "through the peer" {
		t.Fatalf("echo %q", got)
	}
	ch.Close()

	if _, err := links.Open(peer, "dev2", "http", "127.0.0.1", 5555); err == nil || !strings.Contains(err.Error(), "does not serve") {
		t.Fatalf("a device not served here: %v", err)
	}
	stranger := peerlink.New("edge-b", signer(t), nil)
	defer stranger.Close()
	if _, err := stranger.Open(peer, "dev1", "http", "127.0.0.1", 5555); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("a stranger as edge-b: %v", err)
	}
	wrong := peer
	wrong.HostKey = string(ssh.MarshalAuthorizedKey(signer(t).PublicKey()))
	pinned := peerlink.New("edge-b", peerKey, nil)
	defer pinned.Close()
	if _, err := pinned.Open(wrong, "dev1", "http", "127.0.0.1", 5555); !errors.Is(err, agent.ErrHostKey) {
		t.Fatalf("a hub with another host key than published: %v", err)
	}

	// A peer's connection opens peer channels only.
	pc, err := ssh.Dial("tcp", f.addr, &ssh.ClientConfig{User: sshext.PeerUserPrefix + "edge-b", Auth: []ssh.AuthMethod{ssh.PublicKeys(peerKey)},
		HostKeyCallback: ssh.FixedHostKey(f.host)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, _, err := pc.OpenChannel("session", nil); err == nil {
		t.Fatal("a peer opened a session channel")
	}
	if _, _, err := pc.OpenChannel(sshext.PeerChannel, []byte("garbage")); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("a malformed peer channel: %v", err)
	}
}
