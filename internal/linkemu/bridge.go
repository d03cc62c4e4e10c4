package linkemu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread that entered the named network namespace; sockets and
// devices fn creates stay in that namespace. The thread returns to its own namespace
// afterwards and lives on: a thread that ended would take with it every child process it
// had started with a parent-death signal (the lab's peers), and any thread may have.
// Only if it cannot return is it discarded.
func InNetns(ns string, fn func() error) error {
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("linkemu: namespace %s: %w", ns, err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("linkemu: own namespace: %w", err)
			return
		}
		defer home.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("linkemu: entering %s: %w", ns, err)
			return
		}
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: stays locked, and the thread ends with this goroutine
		done <- err
	}()
	return <-done
}

// End is one side of the emulated link: a TUN device in a namespace with an address.
type End struct {
	Netns  string
	Device string       // e.g. lowpan0
	Addr   netip.Prefix // e.g. fd77::1/64
}

// Stats count one direction of the link.
type Stats struct {
	Packets, IPBytes, LinkBytes, Frames, Lost, Dropped atomic.Int64
	Airtime                                            atomic.Int64 // nanoseconds
}

// Bridge carries IP packets between two TUN devices at the pace of a Profile.
type Bridge struct {
	prof     Profile
	tun      [2]*os.File
	Stats    [2]Stats // [0]: a to b, [1]: b to a
	mu       sync.Mutex
	rng      *rand.Rand
	busy     [2]time.Time // medium busy until, per direction (both the same when half duplex)
	queues   [2]chan delivery
	wg       sync.WaitGroup
	onPacket func(dir int, pkt []byte, c Cost)
}

// PacketFunc sees every packet the bridge carries, with its direction (0: a to b) and
// cost; it runs on the bridge's reading goroutines, so it must be quick.
type PacketFunc func(dir int, pkt []byte, c Cost)

type delivery struct {
	at  time.Time
	pkt []byte
}

// maxBacklog is how far ahead of now the medium may be booked before packets are
// dropped: a device's transmit queue is finite.
const maxBacklog = 3 * time.Second

// Open creates the two TUN devices (MTU from the profile, addresses without duplicate
// address detection, so the link is usable at once) and starts carrying packets.
// onPacket may be nil.
func Open(prof Profile, a, b End, seed uint64, onPacket PacketFunc) (*Bridge, error) {
	br := &Bridge{prof: prof, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), onPacket: onPacket}
	for i, e := range []End{a, b} {
		f, err := openTUN(e, prof.MTU)
		if err != nil {
			br.Close()
			return nil, err
		}
		br.tun[i] = f
	}
	for dir := range 2 {
		br.queues[dir] = make(chan delivery, 4096)
		br.wg.Add(2)
		go br.read(dir)
		go br.deliver(dir)
	}
	return br, nil
}

func openTUN(e End, mtu int) (*os.File, error) {
	var f *os.File
	err := InNetns(e.Netns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("linkemu: /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(e.Device)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err == nil {
			err = unix.SetNonblock(fd, true)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("linkemu: creating %s: %w", e.Device, err)
		}
		f = os.NewFile(uintptr(fd), e.Device)
		h, err := netlink.NewHandle() // in this thread's namespace
		if err != nil {
			return err
		}
		defer h.Close()
		link, err := h.LinkByName(e.Device)
		if err == nil {
			err = h.LinkSetMTU(link, mtu)
		}
		if err == nil {
			ip := e.Addr.Addr().AsSlice()
			bits := e.Addr.Bits()
			err = h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, len(ip)*8)}, Flags: unix.IFA_F_NODAD})
		}
		if err == nil {
			err = h.LinkSetUp(link)
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("linkemu: configuring %s in %s: %w", e.Device, e.Netns, err)
		}
		return nil
	})
	return f, err
}

// read takes packets from one side and books them on the medium.
func (br *Bridge) read(dir int) {
	defer br.wg.Done()
	defer close(br.queues[dir])
	buf := make([]byte, 65536)
	st := &br.Stats[dir]
	for {
		n, err := br.tun[dir].Read(buf)
		if err != nil {
			return
		}
		pkt := append([]byte(nil), buf[:n]...)
		br.mu.Lock()
		cost := br.prof.Send(n, br.rng)
		now := time.Now()
		m := dir
		if br.prof.HalfDuplex {
			m = 0
		}
		if br.busy[m].Sub(now) > maxBacklog {
			br.mu.Unlock()
			st.Dropped.Add(1)
			continue
		}
		start := now
		if br.busy[m].After(now) {
			start = br.busy[m]
		}
		end := start.Add(cost.Airtime)
		br.busy[m] = end
		at := end.Add(br.prof.Delay)
		if br.prof.Jitter > 0 {
			at = at.Add(time.Duration(br.rng.Int64N(int64(br.prof.Jitter))))
		}
		br.mu.Unlock()
		if br.onPacket != nil {
			br.onPacket(dir, pkt, cost)
		}
		st.Packets.Add(1)
		st.IPBytes.Add(int64(n))
		st.LinkBytes.Add(int64(cost.LinkBytes))
		st.Frames.Add(int64(cost.Frames))
		st.Airtime.Add(int64(cost.Airtime))
		if cost.Lost {
			st.Lost.Add(1)
			continue
		}
		select {
		case br.queues[dir] <- delivery{at: at, pkt: pkt}:
		default:
			st.Dropped.Add(1)
		}
	}
}

// deliver writes packets to the other side at their arrival times, in order (jitter
// never reorders: an arrival is never earlier than the previous one's).
func (br *Bridge) deliver(dir int) {
	defer br.wg.Done()
	out := br.tun[1-dir]
	var last time.Time
	for d := range br.queues[dir] {
		if d.at.Before(last) {
			d.at = last
		}
		last = d.at
		if w := time.Until(d.at); w > 0 {
			time.Sleep(w)
		}
		if _, err := out.Write(d.pkt); err != nil && errors.Is(err, os.ErrClosed) {
			return
		}
	}
}

// Close removes nothing (the devices vanish with their namespaces or when closed) and
// stops carrying packets.
func (br *Bridge) Close() {
	for _, f := range br.tun {
		if f != nil {
			f.Close()
		}
	}
	br.wg.Wait()
}
