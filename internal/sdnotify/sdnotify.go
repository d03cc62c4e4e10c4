package sdnotify

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier sends state changes to the service manager. The zero value and a nil
// *Notifier send nothing.
type Notifier struct {
	addr     *net.UnixAddr // nil: not run by a service manager
	watchdog time.Duration // 0: no watchdog for this process

	mu     sync.Mutex
	status string // the last STATUS sent, so an unchanged one is not sent again
}

// New is the notifier for a process started with NOTIFY_SOCKET=sock, WATCHDOG_USEC=usec
// and WATCHDOG_PID=wpid (each "" if unset); pid is this process's. An empty sock gives a
// notifier that sends nothing; a watchdog meant for another process (wpid names another
// pid) is ignored. An unusable value is
// an error naming its variable; the process can still run, unsupervised.
func New(sock, usec, wpid string, pid int) (*Notifier, error) {
	n := &Notifier{}
	if sock == "" {
		return n, nil
	}
	switch {
	case strings.HasPrefix(sock, "@"):
		// An abstract socket: its name starts with a NUL byte, written '@'.
		n.addr = &net.UnixAddr{Name: "\x00" + sock[1:], Net: "unixgram"}
	case strings.HasPrefix(sock, "/"):
		n.addr = &net.UnixAddr{Name: sock, Net: "unixgram"}
	default:
		// systemd also allows vsock addresses (for virtual machines); iotsafe does not.
		return &Notifier{}, fmt.Errorf("sdnotify: NOTIFY_SOCKET=%q: only a socket path or an abstract name (@...) is supported", sock)
	}
	if usec == "" {
		return n, nil
	}
	if wpid != "" {
		p, err := strconv.Atoi(wpid)
		if err != nil {
			return n, fmt.Errorf("sdnotify: WATCHDOG_PID=%q: not a pid", wpid)
		}
		if p != pid {
			return n, nil // the watchdog watches another process
		}
	}
	us, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || us == 0 || us > uint64(1<<62)/1000 {
		return n, fmt.Errorf("sdnotify: WATCHDOG_USEC=%q: not a positive number of microseconds", usec)
	}
	n.watchdog = time.Duration(us) * time.Microsecond
	return n, nil
}

// Enabled reports whether a service manager listens.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// WatchdogInterval is the time within which the manager expects a keep-alive, 0 if it
// expects none.
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}

// Ready says the process serves; status, if not empty, is its status line.
func (n *Notifier) Ready(status string) error {
	return n.send(withStatus("READY=1", n.newStatus(status)))
}

// Reloading says a reload of the configuration began; Ready ends it.
func (n *Notifier) Reloading() error {
	// MONOTONIC_USEC lets a manager that knows Type=notify-reload (systemd 253) tell
	// this reload from an earlier one; older ones ignore it.
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return n.send("RELOADING=1")
	}
	return n.send(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000))
}

// Stopping says the process is shutting down.
func (n *Notifier) Stopping(status string) error {
	return n.send(withStatus("STOPPING=1", n.newStatus(status)))
}

// Status sets the one-line status the manager shows (systemctl status); an unchanged
// line is not sent again.
func (n *Notifier) Status(status string) error {
	s := n.newStatus(status)
	if s == "" {
		return nil
	}
	return n.send("STATUS=" + s)
}

// newStatus is status as a protocol value ("" if empty or unchanged), remembered as the
// last one. A newline would start a field of its own, so line breaks become spaces.
func (n *Notifier) newStatus(status string) string {
	if !n.Enabled() || status == "" {
		return ""
	}
	status = strings.Join(strings.Fields(status), " ")
	n.mu.Lock()
	defer n.mu.Unlock()
	if status == n.status {
		return ""
	}
	n.status = status
	return status
}

func withStatus(msg, status string) string {
	if status == "" {
		return msg
	}
	return msg + "\nSTATUS=" + status
}

// Watchdog sends one keep-alive.
func (n *Notifier) Watchdog() error { return n.send("WATCHDOG=1") }

// Keep runs check every period (0: only for the watchdog), and at least twice per
// watchdog interval, until ctx ends: the status line it returns goes to the manager, and
// each check that passes is followed by a keep-alive. It returns at once outside a
// service manager. check runs on this goroutine, so a check that never returns (a
// deadlock in what it probes) stops the keep-alives and the manager kills and restarts
// the process, as it should; a check that fails skips its keep-alive (saying why is the
// check's business). A send that fails is reported to failed, if set.
func (n *Notifier) Keep(ctx context.Context, period time.Duration, check func() (string, error), failed func(error)) {
	if !n.Enabled() {
		return
	}
	if iv := n.WatchdogInterval(); iv > 0 && (period <= 0 || period > iv/2) {
		period = iv / 2
	}
	if period <= 0 {
		return // no status to refresh, no watchdog to answer
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if status, err := check(); err == nil {
			err = n.Status(status)
			if err == nil && n.WatchdogInterval() > 0 {
				err = n.Watchdog()
			}
			if err != nil && failed != nil {
				failed(err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// send writes msg as one datagram on a socket of its own, as sd_notify does: nothing
// stays open between messages.
func (n *Notifier) send(msg string) error {
	if !n.Enabled() {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: telling the service manager: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sdnotify: telling the service manager: %w", err)
	}
	return nil
}
