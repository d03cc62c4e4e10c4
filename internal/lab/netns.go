package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
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
	if err := AddNetns(name); err != nil {
		return nil, err
	}
	n := &Netns{Name: name, dial: make(chan dialReq)}
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
	dial := n.dial // read before started: Close clears the field
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
	for r := range dial {
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
	DelNetns(n.Name)
}

// Every namespace the lab makes is named iotsafe-ROLE-PID, PID being the lab's own
// process: SweepStaleNetns can then tell which ones a killed run left behind.
var labNetnsName = regexp.MustCompile(`^iotsafe-(bench|dev-dev|dev-gw|link-dev|link-gw|wssec-dev|wssec-gw|tls-dev|tls-gw|scale-c|scale-g[0-9]+|hubs-sw|hubs-dev|hubs-h[0-9]+)-([0-9]+)$`)

// NetnsName is the name of this process's namespace for role (one of labNetnsName's).
func NetnsName(role string) string { return fmt.Sprintf("iotsafe-%s-%d", role, os.Getpid()) }

// AddNetns creates a namespace with its loopback up; it is removed again on failure.
func AddNetns(name string) error {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("lab: ip netns add %s: %v: %s (needs root)", name, err, bytes.TrimSpace(out))
	}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		DelNetns(name)
		return fmt.Errorf("lab: lo up in %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// DelNetns deletes a namespace, with the links, addresses and nftables tables in it.
func DelNetns(name string) { exec.Command("ip", "netns", "del", name).Run() }

// processRuns tells whether pid is a process that has not exited. A zombie has: a run
// killed a moment ago stays one until its parent reaps it.
func processRuns(pid int) bool {
	if unix.Kill(pid, 0) == unix.ESRCH {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return true
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

// SweepStaleNetns deletes the lab namespaces whose run no longer exists (a run that was
// killed cannot clean up; its namespaces would hold routes and tables for nothing) and
// returns their names. A namespace of a process that still runs is left alone, whoever
// it is: a reused PID only delays the sweep.
func SweepStaleNetns() ([]string, error) {
	entries, err := os.ReadDir("/var/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, e := range entries {
		m := labNetnsName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[2])
		if err != nil || pid <= 0 || processRuns(pid) {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			return gone, fmt.Errorf("lab: removing stale namespace %s: %v: %s", e.Name(), err, bytes.TrimSpace(out))
		}
		gone = append(gone, e.Name())
	}
	return gone, nil
}

// scratchName matches the scratch folders NewScratch makes: iotsafe-bench-PID-RANDOM.
var scratchName = regexp.MustCompile(`^iotsafe-bench-([0-9]+)-[0-9]+$`)

// NewScratch makes a run's scratch folder (keys, configurations, peers' files) in the
// temporary directory, named after this process so SweepStaleScratch can tell whose it
// is. The caller removes it.
func NewScratch() (string, error) {
	return os.MkdirTemp("", fmt.Sprintf("iotsafe-bench-%d-", os.Getpid()))
}

// SweepStaleScratch removes the scratch folders of runs that no longer exist and returns
// their paths. Only folders of this user, by NewScratch's name, directly in the
// temporary directory are considered.
func SweepStaleScratch() ([]string, error) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, e := range entries {
		m := scratchName.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() { // IsDir is false for a symbolic link
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || processRuns(pid) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || int(st.Uid) != os.Getuid() {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			return gone, fmt.Errorf("lab: removing stale scratch folder %s: %w", path, err)
		}
		gone = append(gone, path)
	}
	return gone, nil
}
