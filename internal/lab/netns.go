package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace the lab creates for paths that need the kernel access
// layer: the hub's nftables table lives there, so the host's ruleset is never touched.
type Netns struct {
	Name string
	fd   *os.File
	dial chan dialReq
}

type dialReq struct {
	ctx  context.Context
	addr string
	out  chan dialRes
}

type dialRes struct {
	c   net.Conn
	err error
}

// NewNetns creates the namespace with loopback up and workers threads that dial from
// inside it (a socket belongs to the namespace of the thread that created it). With uid
// > 0 those threads also take that uid, so the sockets they open are owned by it, as a
// platform process's would be.
func NewNetns(name string, workers int, uid int) (*Netns, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("lab: ip netns add %s: %v %s", name, err, out)
	}
	n := &Netns{Name: name, dial: make(chan dialReq)}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		n.Close()
		return nil, fmt.Errorf("lab: lo up in %s: %v %s", name, err, out)
	}
	f, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		n.Close()
		return nil, err
	}
	n.fd = f
	for range workers {
		started := make(chan error)
		go n.worker(started, uid)
		if err := <-started; err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *Netns) worker(started chan<- error, uid int) {
	// This thread is moved into the namespace and never leaves: the goroutine keeps it
	// locked until it returns, and then the runtime discards the thread.
	runtime.LockOSThread()
	if err := unix.Setns(int(n.fd.Fd()), unix.CLONE_NEWNET); err != nil {
		started <- err
		return
	}
	if uid > 0 {
		// The raw system call changes this thread only (syscall.Setresuid would change
		// every thread of the process, the bench's own included).
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			started <- fmt.Errorf("lab: setresuid %d: %w", uid, e)
			return
		}
	}
	started <- nil
	for r := range n.dial {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err := d.DialContext(r.ctx, "tcp", r.addr)
		r.out <- dialRes{c, err}
	}
}

// Dial connects to addr from inside the namespace.
func (n *Netns) Dial(ctx context.Context, addr string) (net.Conn, error) {
	out := make(chan dialRes, 1)
	select {
	case n.dial <- dialReq{ctx, addr, out}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := <-out
	return r.c, r.err
}

// Exec returns argv prefixed to run inside the namespace.
func (n *Netns) Exec(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", n.Name}, argv...)
}

// Close stops the dialers and deletes the namespace (and with it the hub's table).
func (n *Netns) Close() {
	if n.dial != nil {
		close(n.dial)
		n.dial = nil
	}
	if n.fd != nil {
		n.fd.Close()
	}
	exec.Command("ip", "netns", "del", n.Name).Run()
}
