package tlsbench

import (
	"context"
	"net"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// netEnv is where both ends of every implementation run: on loopback (pair nil), or across the lab's
// emulated link, the client in the device's namespace and the server in the gateway's,
// so every handshake pays the link's frames and airtime.
type netEnv struct{ pair *lab.LinkPair }

func (e netEnv) serverIP() net.IP {
	if e.pair == nil {
		return net.IPv4(127, 0, 0, 1)
	}
	return net.ParseIP(lab.LinkGWAddr)
}

func (e netEnv) clientIP() net.IP {
	if e.pair == nil {
		return net.IPv4(127, 0, 0, 1)
	}
	return net.ParseIP(lab.LinkDevAddr)
}

func (e netEnv) inServer(fn func() error) error {
	if e.pair == nil {
		return fn()
	}
	return linkemu.InNetns(e.pair.GW, fn)
}

func (e netEnv) inClient(fn func() error) error {
	if e.pair == nil {
		return fn()
	}
	return linkemu.InNetns(e.pair.Dev, fn)
}

// serverArgv is a C helper's command line run at the server's end: in the gateway's
// namespace on a link.
func (e netEnv) serverArgv(argv ...string) []string {
	if e.pair == nil {
		return argv
	}
	return append([]string{"ip", "netns", "exec", e.pair.GW}, argv...)
}

// clientArgv is a C helper's command line run at the client's end.
func (e netEnv) clientArgv(argv ...string) []string {
	if e.pair == nil {
		return argv
	}
	return append([]string{"ip", "netns", "exec", e.pair.Dev}, argv...)
}

// listenArg is a helper server's PORT argument: any port on the server's address.
func (e netEnv) listenArg() string {
	if e.pair == nil {
		return "0"
	}
	return "[" + lab.LinkGWAddr + "]:0"
}

func (e netEnv) listenTCP() (ln net.Listener, err error) {
	err = e.inServer(func() error {
		ln, err = net.Listen("tcp", net.JoinHostPort(e.serverIP().String(), "0"))
		return err
	})
	return ln, err
}

func (e netEnv) dialTCP(ctx context.Context, addr string) (c net.Conn, err error) {
	err = e.inClient(func() error {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

func (e netEnv) listenUDP() (pc *net.UDPConn, err error) {
	err = e.inClient(func() error {
		pc, err = net.ListenUDP("udp", &net.UDPAddr{IP: e.clientIP()})
		return err
	})
	return pc, err
}
