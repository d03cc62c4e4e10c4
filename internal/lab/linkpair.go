package lab

import (
	"net"
	"net/netip"
	"time"

	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// The two ends of a LinkPair: the device side and the gateway (server) side.
const (
	LinkDevAddr = "fd77::1"
	LinkGWAddr  = "fd77::2"
)

// LinkPair is two fresh namespaces of the lab's, a device side (Dev) and a gateway side
// (GW), joined by the emulated link: what runs in Dev reaches what listens on
// [LinkGWAddr] in GW over the link's rate, delay and losses.
type LinkPair struct {
	Dev, GW string
	Bridge  *linkemu.Bridge
}

// NewLinkPair creates the namespaces (named iotsafe-TAG-dev-PID and iotsafe-TAG-gw-PID;
// TAG must be one SweepStaleNetns knows) and the link; trace, if set, sees every packet.
func NewLinkPair(prof linkemu.Profile, tag string, trace linkemu.PacketFunc) (*LinkPair, error) {
	p := &LinkPair{Dev: NetnsName(tag + "-dev"), GW: NetnsName(tag + "-gw")}
	for _, ns := range []string{p.Dev, p.GW} {
		if err := AddNetns(ns); err != nil {
			p.Close()
			return nil, err
		}
	}
	br, err := linkemu.Open(prof, linkemu.End{Netns: p.Dev, Device: "lowpan0", Addr: netip.MustParsePrefix(LinkDevAddr + "/64")},
		linkemu.End{Netns: p.GW, Device: "lowpan0", Addr: netip.MustParsePrefix(LinkGWAddr + "/64")}, uint64(time.Now().UnixNano()), trace)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.Bridge = br
	return p, nil
}

// Close removes the link and both namespaces.
func (p *LinkPair) Close() {
	if p.Bridge != nil {
		p.Bridge.Close()
	}
	for _, ns := range []string{p.Dev, p.GW} {
		DelNetns(ns)
	}
}

// DialIn returns a dialer whose connections start inside namespace ns.
func (p *LinkPair) DialIn(ns string) func(string) (net.Conn, error) {
	return func(addr string) (c net.Conn, err error) {
		err = linkemu.InNetns(ns, func() error {
			c, err = net.DialTimeout("tcp", addr, 10*time.Second)
			return err
		})
		return c, err
	}
}

// LinkCost is what crossed the link: frames (retransmissions included, acknowledgements
// not), bytes on the air, and airtime each way.
type LinkCost struct {
	Frames, LinkBytes int64
	TX, RX            time.Duration // device to gateway, and back
}

// Cost reads the link's counters so far; the difference of two readings is what crossed
// in between. A nil pair (loopback) costs nothing.
func (p *LinkPair) Cost() LinkCost {
	if p == nil {
		return LinkCost{}
	}
	s0, s1 := &p.Bridge.Stats[0], &p.Bridge.Stats[1] // 0: device to gateway
	return LinkCost{Frames: s0.Frames.Load() + s1.Frames.Load(), LinkBytes: s0.LinkBytes.Load() + s1.LinkBytes.Load(),
		TX: time.Duration(s0.Airtime.Load()), RX: time.Duration(s1.Airtime.Load())}
}

// Minus is a - b.
func (a LinkCost) Minus(b LinkCost) LinkCost {
	return LinkCost{a.Frames - b.Frames, a.LinkBytes - b.LinkBytes, a.TX - b.TX, a.RX - b.RX}
}

// Plus is a + b.
func (a LinkCost) Plus(b LinkCost) LinkCost {
	return LinkCost{a.Frames + b.Frames, a.LinkBytes + b.LinkBytes, a.TX + b.TX, a.RX + b.RX}
}
