package tlsbench

import (
	"context"
	"net"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// netEnv is where the Go and pion ends run: on loopback (pair nil), or across the lab's
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

// linkCost is the emulated link's counters (zero on loopback).
type linkCost struct {
	Frames, LinkBytes int64
	TX, RX            time.Duration // airtime device to gateway, and back
}

func (e netEnv) snap() linkCost {
	if e.pair == nil {
		return linkCost{}
	}
	s0, s1 := &e.pair.Bridge.Stats[0], &e.pair.Bridge.Stats[1] // 0: device to gateway
	return linkCost{Frames: s0.Frames.Load() + s1.Frames.Load(), LinkBytes: s0.LinkBytes.Load() + s1.LinkBytes.Load(),
		TX: time.Duration(s0.Airtime.Load()), RX: time.Duration(s1.Airtime.Load())}
}

func (a linkCost) minus(b linkCost) linkCost {
	return linkCost{a.Frames - b.Frames, a.LinkBytes - b.LinkBytes, a.TX - b.TX, a.RX - b.RX}
}
