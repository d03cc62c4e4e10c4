package lab

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshwire"
)

// badForwardServer is an SSH server that answers the first `wrong` port-0 forward
// requests with its own listening port, as Dropbear 2022.83 now and then does under
// ~2,000 sessions, and then with port 4242. A stand-in: the real quirk is too rare to
// provoke in a test.
func badForwardServer(t *testing.T, wrong int) (addr string, hostKey ssh.PublicKey, cancels *int) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	own := uint32(l.Addr().(*net.TCPAddr).Port)
	cancels = new(int)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			return
		}
		defer conn.Close()
		go func() {
			for nc := range chans {
				nc.Reject(ssh.Prohibited, "no channels here")
			}
		}()
		for r := range reqs {
			switch r.Type {
			case "tcpip-forward":
				port := uint32(4242)
				if wrong > 0 {
					wrong--
					port = own
				}
				r.Reply(true, ssh.Marshal(sshwire.ForwardReply{Port: port}))
			case "cancel-tcpip-forward":
				*cancels++ // read by the test only after forward returns: the reply orders it
				r.Reply(false, nil)
			default:
				r.Reply(false, nil)
			}
		}
	}()
	return l.Addr().String(), signer.PublicKey(), cancels
}

func dialFleetTest(t *testing.T, addr string, hostKey ssh.PublicKey) ssh.Conn {
	t.Helper()
	tc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, reqs, err := ssh.NewClientConn(tc, addr, &ssh.ClientConfig{User: "root", HostKeyCallback: ssh.FixedHostKey(hostKey)})
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestFleetAsksAgainWhenServerAllocatesItsOwnPort(t *testing.T) {
	addr, key, cancels := badForwardServer(t, 1)
	c := FleetConfig{Server: addr}
	port, err := c.forward(dialFleetTest(t, addr, key), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if port != 4242 || *cancels != 1 {
		t.Fatalf("port %d after %d cancels, want 4242 after 1", port, *cancels)
	}
}

func TestFleetGivesUpOnAServerThatOnlyAllocatesItsOwnPort(t *testing.T) {
	addr, key, _ := badForwardServer(t, forwardAttempts)
	c := FleetConfig{Server: addr}
	_, err := c.forward(dialFleetTest(t, addr, key), "127.0.0.1")
	_, own, _ := net.SplitHostPort(addr)
	want := "allocated its own listening port " + own + " " + strconv.Itoa(forwardAttempts) + " times"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to say %q", err, want)
	}
}
