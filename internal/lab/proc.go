package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/childproc"
)

// Proc is a peer process started by the lab, in its own process group so that it and
// its children (sshd forks one per session) stop together.
type Proc struct {
	Name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{}

	mu     sync.Mutex
	lines  []string      // stdout lines not read yet: never dropped (a fleet prints thousands)
	more   chan struct{} // closed and replaced when a line arrives or stdout ends
	closed bool          // stdout ended
}

// StartProc starts name with args; env entries are added to the lab's environment.
func StartProc(name string, env []string, argv ...string) (*Proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Proc{Name: name, cmd: cmd, stderr: &tailBuffer{max: 8192}, done: make(chan struct{}), more: make(chan struct{})}
	cmd.Stderr = p.stderr
	logFile, err := keptLog(name)
	if err != nil {
		return nil, err
	}
	if logFile != nil {
		cmd.Stderr = keptWriter{p.stderr, logFile}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := childproc.Start(cmd); err != nil { // dies with the lab
		logFile.Close()
		return nil, fmt.Errorf("lab: start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.push(sc.Text(), false)
		}
		p.push("", true)
	}()
	go func() {
		cmd.Wait() // copies standard error to its end
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// logs is where KeepLogs keeps the lab's processes' standard error.
var logs struct {
	mu   sync.Mutex
	dir  string
	seen map[string]int // starts per process name
}

// KeepLogs makes every process the lab starts from now on write its whole standard
// error to DIR/NAME.log (NAME.2.log for its second start, and so on), and the lab's
// hubs log at debug level: for finding why a run failed. Without it only the last few
// KiB are kept, for error messages. KeepLogs("") turns it off.
func KeepLogs(dir string) error {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	logs.dir, logs.seen = dir, map[string]int{}
	return nil
}

// LogsKept reports whether KeepLogs is on.
func LogsKept() bool {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	return logs.dir != ""
}

// keptWriter writes to the tail and to the kept log; a failing log (a full disk) is
// not the process's problem: its writes must never block or fail because of it.
type keptWriter struct {
	tail *tailBuffer
	file *os.File
}

func (w keptWriter) Write(b []byte) (int, error) {
	w.file.Write(b)
	return w.tail.Write(b)
}

// keptLog creates the log file of the next start of name, or returns nil when logs
// are not kept. (A nil *os.File's Close is harmless.)
func keptLog(name string) (*os.File, error) {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if logs.dir == "" {
		return nil, nil
	}
	base := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, name)
	logs.seen[base]++
	if n := logs.seen[base]; n > 1 {
		base = fmt.Sprintf("%s.%d", base, n)
	}
	f, err := os.OpenFile(filepath.Join(logs.dir, base+".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lab: keeping the log of %s: %w", name, err)
	}
	return f, nil
}

// StderrTail is the last few KiB the process wrote to standard error.
func (p *Proc) StderrTail() string { return p.stderr.String() }

// PID of the process (the group leader).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

func (p *Proc) push(line string, end bool) {
	p.mu.Lock()
	if end {
		p.closed = true
	} else {
		p.lines = append(p.lines, line)
	}
	close(p.more)
	p.more = make(chan struct{})
	p.mu.Unlock()
}

// ReadLine waits for the next stdout line that has prefix (readiness signals); lines
// without it are consumed.
func (p *Proc) ReadLine(ctx context.Context, prefix string) (string, error) {
	return p.ReadLineSeeing(ctx, prefix, nil)
}

// ReadLineSeeing is ReadLine that shows seen the lines it consumes on the way.
func (p *Proc) ReadLineSeeing(ctx context.Context, prefix string, seen func(string)) (string, error) {
	l, err := p.ReadLineFunc(ctx, "a line starting "+strconv.Quote(prefix), func(l string) bool {
		if strings.HasPrefix(l, prefix) {
			return true
		}
		if seen != nil {
			seen(l)
		}
		return false
	})
	return strings.TrimSpace(strings.TrimPrefix(l, prefix)), err
}

// ReadLineFunc waits for the next stdout line match is true of (a JSON log record's
// message, where a prefix does not tell); lines before it are consumed. what names the
// line in errors.
func (p *Proc) ReadLineFunc(ctx context.Context, what string, match func(string) bool) (string, error) {
	for {
		p.mu.Lock()
		for len(p.lines) > 0 {
			l := p.lines[0]
			p.lines = p.lines[1:]
			if match(l) {
				p.mu.Unlock()
				return l, nil
			}
		}
		closed, more := p.closed, p.more
		p.mu.Unlock()
		if closed {
			return "", fmt.Errorf("lab: %s exited before %s: %s", p.Name, what, p.stderr.String())
		}
		select {
		case <-more:
		case <-ctx.Done():
			return "", fmt.Errorf("lab: %s: no %s: %w; stderr: %s", p.Name, what, ctx.Err(), p.stderr.String())
		}
	}
}

// Exited is closed once the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Stop ends the process group: SIGTERM, then SIGKILL after grace.
func (p *Proc) Stop() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	// Children that left the group (none expected) are not chased.
}

// Kill ends the process group at once (SIGKILL: a crash, no clean shutdown) and waits.
func (p *Proc) Kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// WaitTCP waits until addr accepts connections: for peers that print no readiness line.
func WaitTCP(ctx context.Context, p *Proc, addr string) error {
	if err := WaitTCPWith(ctx, p, addr, func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }); err != nil {
		return err
	}
	// Whoever answers must be p: its port was free a moment ago, not reserved.
	if owned, known := listenerOwner(p.PID(), addr); known && !owned {
		return fmt.Errorf("lab: %s answers on %s, but from a process the lab did not start (it took the port first): not measuring it; run again", p.Name, addr)
	}
	return nil
}

// WaitTCPWith is WaitTCP with a dialer of the caller's (one inside a namespace).
func WaitTCPWith(ctx context.Context, p *Proc, addr string, dial func(string) (net.Conn, error)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		c, err := dial(addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("lab: %s exited: %s", p.Name, p.stderr.String())
		case <-ctx.Done():
			return fmt.Errorf("lab: %s not listening on %s: %w", p.Name, addr, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// StablePort returns a free loopback port for a server the lab restarts on the same
// address (the port is written into enrolled profiles). FreePort's ports come from the
// ephemeral range, where, between two starts, an outgoing connection of the lab (a
// client that has not yet closed its side) may take the port and the restart fails
// with "address already in use". These come from below that range.
func StablePort() (int, error) {
	lo := 32768 // Linux's default start of ip_local_port_range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	const floor = 10000 // above the well-known and common service ports
	if lo <= floor+1000 {
		return FreePort() // no room below the range
	}
	for range 100 {
		port := floor + rand.IntN(lo-floor)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("lab: no free loopback port between %d and %d", floor, lo)
}

// Memory of a process tree, in KiB.
type Memory struct {
	RSS, PSS int64
	Procs    int
}

// TreeCPU returns the CPU time (user + system) used so far by pid and its live
// descendants, plus what their exited children used (cutime, cstime): sshd's
// per-connection processes count once they are reaped.
//
// Live processes are measured in nanoseconds from their threads' schedstat (on-CPU
// time), since utime/stime come in 10 ms ticks, too coarse for a short series of
// requests; reaped children only exist as ticks. Without schedstat, ticks are used.
func TreeCPU(pid int) (time.Duration, error) {
	var total time.Duration
	found := false
	for _, p := range treePIDs(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		// After the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
		if len(f) <= 14 {
			continue
		}
		tick := func(i int) time.Duration {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return time.Duration(v) * time.Second / 100 // USER_HZ is 100 on Linux
		}
		own, ok := threadsOnCPU(p)
		if !ok {
			own = tick(11) + tick(12)
		}
		total += own + tick(13) + tick(14)
		found = true
	}
	if !found {
		return 0, errors.New("lab: process gone")
	}
	return total, nil
}

// threadsOnCPU sums the on-CPU nanoseconds of pid's live threads (/proc/PID/task/*/schedstat);
// threads that already exited are not counted (Go runtimes and sshd keep theirs).
func threadsOnCPU(pid int) (time.Duration, bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, false
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		ns += v
	}
	return time.Duration(ns), true
}

// treePIDs lists pid and all its descendants.
func treePIDs(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], n)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// TreeMemory sums RSS and PSS (from smaps_rollup) over pid and all its descendants.
func TreeMemory(pid int) (Memory, error) {
	var m Memory
	for _, p := range treePIDs(pid) {
		rss, pss, err := smapsRollup(p)
		if err != nil {
			continue
		}
		m.RSS += rss
		m.PSS += pss
		m.Procs++
	}
	if m.Procs == 0 {
		return m, errors.New("lab: process gone")
	}
	return m, nil
}

func smapsRollup(pid int) (rss, pss int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Rss:":
			rss = v
		case "Pss:":
			pss = v
		}
	}
	return rss, pss, sc.Err()
}

// tailBuffer keeps the last max bytes written (a peer's stderr, for error messages).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

var _ io.Writer = (*tailBuffer)(nil)

// RaiseFileLimit lifts this process's open-file limit, and so its children's (servers,
// fleets): 10,000 sessions hold tens of thousands of descriptors. Root may raise the hard
// limit up to fs.nr_open; others only the soft one. The new limit is reported.
func RaiseFileLimit(p *Progress) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	want := lim.Max
	if os.Geteuid() == 0 {
		if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > want {
				want = n
			}
		}
	}
	if lim.Cur >= want {
		return
	}
	old, hard := lim.Cur, lim.Max
	lim.Cur, lim.Max = want, max(lim.Max, want)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		p.Note(fmt.Sprintf("open-file limit raised from %d to %d for the bench and its servers", old, want))
		return
	}
	// Without CAP_SYS_RESOURCE (containers) only the soft limit can rise.
	lim.Cur, lim.Max = hard, hard
	if old < hard && unix.Setrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		lim.Cur = old
	}
	p.Note(fmt.Sprintf("open-file limit %d, the hard limit (raising it needs CAP_SYS_RESOURCE): "+
		"a hub holds about two descriptors per device session (connection and protected socket)", lim.Cur))
}

// OpenFiles counts the descriptors pid holds open.
func OpenFiles(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}
