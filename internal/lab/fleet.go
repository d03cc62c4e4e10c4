package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/sshwire"
	"github.com/iotsafe/iotsafe/internal/tunnel"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// FleetConfig describes the device side of a benchmark: Sessions SSH sessions, each with
// Forwards reverse forwards to Target. The same fleet drives every SSH server under test.
type FleetConfig struct {
	Server   string
	HostKey  ssh.PublicKey
	Target   string
	Sessions int
	Forwards int
	// IoTsafe: log in as dev0..devN-1 with keys KeyDir/devI and ask for aliases f0..fP-1.
	// Otherwise: log in as User with KeyDir/client and ask for 127.0.0.1 port 0.
	IoTsafe bool
	// Prefix of the device names with IoTsafe; "" means "dev".
	Prefix string
	// Multiplex (with IoTsafe) carries the forwards in one multiplexed channel, as the
	// agent does by default.
	Multiplex bool
	User      string
	KeyDir    string
	// Parallel bounds concurrent handshakes; 0 means 32.
	Parallel int
}

// DeviceName is the lab's name of device i: PREFIXi, prefix "" meaning "dev".
func DeviceName(prefix string, i int) string {
	if prefix == "" {
		prefix = "dev"
	}
	return fmt.Sprintf("%s%d", prefix, i)
}

// RunFleet connects the whole fleet, prints "forward ADDR" per generic forward and then
// "ready", and serves forwarded connections until ctx ends.
func RunFleet(ctx context.Context, c FleetConfig, out io.Writer) error {
	if c.Parallel == 0 {
		c.Parallel = 32
	}
	sem := make(chan struct{}, c.Parallel)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	var conns []ssh.Conn
	for i := range c.Sessions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, addrs, err := c.session(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("session %d: %w", i, err)
				}
				return
			}
			conns = append(conns, conn)
			for _, a := range addrs {
				fmt.Fprintf(out, "forward %s\n", a)
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if firstErr != nil {
		return firstErr
	}
	fmt.Fprintln(out, "ready")
	<-ctx.Done()
	return nil
}

func (c FleetConfig) session(i int) (ssh.Conn, []string, error) {
	user, keyFile := c.User, filepath.Join(c.KeyDir, "client")
	if c.IoTsafe {
		user = DeviceName(c.Prefix, i)
		keyFile = filepath.Join(c.KeyDir, user)
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, nil, err
	}
	tc, err := net.DialTimeout("tcp", c.Server, 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	conn, chans, reqs, err := ssh.NewClientConn(tc, c.Server, &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(c.HostKey), Timeout: 30 * time.Second,
		// Offer only the pinned key's algorithm. (Dropbear 2022.83 with only an ed25519 key
		// aborts on an assertion when a client lists rsa-sha2-* first.)
		HostKeyAlgorithms: []string{c.HostKey.Type()},
	})
	if err != nil {
		tc.Close()
		return nil, nil, err
	}
	// One goroutine answers the hub's keepalives, the multiplexed channel's requests and
	// channel opens: a fleet holds up to a gateway's worth of sessions per process, and
	// goroutines are most of a simulated device's memory. It also says when the
	// connection has ended (its requests and channels close), for the mux's open.
	ended := make(chan struct{})
	muxReqs := make(chan (<-chan *ssh.Request), 1)
	go func() {
		defer close(ended)
		var mreqs <-chan *ssh.Request
		for reqs != nil || chans != nil {
			select {
			case mreqs = <-muxReqs:
			case r, ok := <-reqs:
				if !ok {
					reqs = nil
				} else if r.WantReply {
					r.Reply(false, nil)
				}
			case r, ok := <-mreqs:
				if !ok {
					mreqs = nil
				} else if r.WantReply {
					r.Reply(false, nil)
				}
			case nc, ok := <-chans:
				if !ok {
					chans = nil
					continue
				}
				go c.serveChannel(nc)
			}
		}
	}()
	if c.Multiplex {
		// The agent's default: version 2 of the framing (the lab's hub is this binary).
		// sshext.OpenChannel: an open racing the hub's close would otherwise wait for ever.
		ch, mreqs, err := sshext.OpenChannel(conn, ended, sshext.MuxChannel, ssh.Marshal(sshext.MuxOpen{Mode: sshext.MuxPlain + sshext.MuxV2}))
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("multiplexed channel: %w", err)
		}
		muxReqs <- mreqs
		zmux.New(ch, zmux.Options{Device: true, Version2: true, Handle: c.serveStream})
	}
	var addrs []string
	for p := range c.Forwards {
		host := "127.0.0.1"
		if c.IoTsafe {
			host = fmt.Sprintf("f%d", p)
		}
		port, err := c.forward(conn, host)
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("forward %d of %d: %w", p+1, c.Forwards, err)
		}
		if !c.IoTsafe {
			addrs = append(addrs, net.JoinHostPort(host, fmt.Sprint(port)))
		}
	}
	return conn, addrs, nil
}

// forwardAttempts bounds how often forward asks again after an impossible answer.
const forwardAttempts = 3

// forward asks for a reverse forward on host, port 0, and returns the port the server
// allocated. Under about 2,000 sessions Dropbear 2022.83 now and then answers with its own
// listening port, where requests would reach its SSH banner instead of the forward: such
// an answer is cancelled and asked again.
func (c FleetConfig) forward(conn ssh.Conn, host string) (uint32, error) {
	_, serverPort, _ := net.SplitHostPort(c.Server)
	for range forwardAttempts {
		ok, reply, err := conn.SendRequest("tcpip-forward", true, ssh.Marshal(sshwire.ForwardRequest{Addr: host}))
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, fmt.Errorf("the server refused it (Dropbear, for one, caps listeners per session)")
		}
		if c.IoTsafe {
			return 0, nil // the hub answers with the protected socket's port; the lab asks the hub
		}
		var allocated sshwire.ForwardReply
		if err := ssh.Unmarshal(reply, &allocated); err != nil || allocated.Port == 0 {
			return 0, fmt.Errorf("the server did not say which port it allocated (reply %x)", reply)
		}
		if fmt.Sprint(allocated.Port) != serverPort {
			return allocated.Port, nil
		}
		fmt.Fprintf(os.Stderr, "fleet: %s allocated its own listening port %d for a forward; asking again\n", c.Server, allocated.Port)
		conn.SendRequest("cancel-tcpip-forward", true, ssh.Marshal(sshwire.ForwardRequest{Addr: host, Port: allocated.Port}))
	}
	return 0, fmt.Errorf("the server allocated its own listening port %s %d times", serverPort, forwardAttempts)
}

// localDial connects to the device application, as an agent does for a service on the
// device itself: no TCP keepalive. A connect that fails is tried once more: at 100,000
// devices, 1-3 connects per run between a gateway's namespace and the lab's one
// application fail with the kernel's "connection timed out" within seconds (a lab
// artefact: a device's service is on the device). Each failure is said on standard
// error (kept with --logs) with how long the connect took; the hub's client sees a
// reset only when the second fails too.
func localDial(addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: -1}
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		start := time.Now()
		var c net.Conn
		if c, err = d.Dial("tcp", addr); err == nil {
			return c, nil
		}
		fmt.Fprintf(os.Stderr, "fleet: %s: connecting to the target failed after %s (attempt %d of 2): %v\n",
			start.Format(time.RFC3339Nano), time.Since(start).Round(time.Millisecond), attempt, err)
	}
	return nil, err
}

// serveChannel connects a channel the server opens (a forwarded connection) to the
// target.
func (c FleetConfig) serveChannel(nc ssh.NewChannel) {
	t, err := localDial(c.Target)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, creqs, err := nc.Accept()
	if err != nil {
		t.Close()
		return
	}
	go ssh.DiscardRequests(creqs)
	tunnel.Pipe(ch, t, nil)
}

// serveStream connects a stream the hub opens to the target.
func (c FleetConfig) serveStream(st *zmux.Stream) {
	go func() {
		t, err := localDial(c.Target)
		if err != nil {
			st.Reset(err.Error())
			return
		}
		tunnel.Pipe(st, t, nil)
	}()
}
