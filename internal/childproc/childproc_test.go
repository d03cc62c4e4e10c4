package childproc

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// catChild is a running cat whose stdin and stdout the test holds: it answers a line
// only while it is alive.
type catChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func newCat(t *testing.T) *catChild {
	t.Helper()
	cmd := exec.Command("cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return &catChild{cmd: cmd, in: in, out: bufio.NewReader(out)}
}

// startOnEndingThread starts the child from a goroutine locked to its thread that then
// returns, so the runtime ends that thread; it returns once the thread is gone.
func startOnEndingThread(t *testing.T, start func() error) {
	t.Helper()
	id, errc := lockedThread(t, start)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	task := "/proc/self/task/" + strconv.Itoa(id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not end", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// lockedThread runs fn on a goroutine locked to a thread the runtime will end when fn
// returns, and reports the thread's id. The process's main thread is never ended (the
// runtime parks it instead), so a goroutine that lands there keeps it until the test
// ends and another one is tried.
func lockedThread(t *testing.T, fn func() error) (int, <-chan error) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	for {
		tid := make(chan int, 1)
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			id := unix.Gettid()
			tid <- id
			if id == os.Getpid() {
				<-release
				runtime.UnlockOSThread()
				return
			}
			errc <- fn()
		}()
		if id := <-tid; id != os.Getpid() {
			return id, errc
		}
	}
}

// The hazard Start exists for: a child forked with a parent-death signal from a thread
// that ends is killed although its parent process runs on.
func TestPlainStartDiesWithItsThread(t *testing.T) {
	c := newCat(t)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	startOnEndingThread(t, c.cmd.Start)
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child forked on an ended thread: wait = %v, want killed by SIGKILL", err)
	}
}

// A child started with Start lives on when the goroutine that asked for it ends its
// thread, and keeps the caller's other process attributes.
func TestStartSurvivesEndedThread(t *testing.T) {
	c := newCat(t)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	startOnEndingThread(t, func() error { return Start(c.cmd) })
	if _, err := c.in.Write([]byte("alive\n")); err != nil {
		t.Fatalf("child is gone after its requesting thread ended: %v", err)
	}
	if line, err := c.out.ReadString('\n'); err != nil || line != "alive\n" {
		t.Fatalf("child is gone after its requesting thread ended: read %q, %v", line, err)
	}
	if pgid, err := syscall.Getpgid(c.cmd.Process.Pid); err != nil || pgid != c.cmd.Process.Pid {
		t.Fatalf("Setpgid was lost: pgid %d (%v), pid %d", pgid, err, c.cmd.Process.Pid)
	}
	if !c.cmd.SysProcAttr.Setpgid || c.cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("SysProcAttr = %+v", c.cmd.SysProcAttr)
	}
}

// A process that cannot start reports the error like exec.Cmd.Start.
func TestStartError(t *testing.T) {
	cmd := exec.Command("/nonexistent/iotsafe-test-binary")
	if err := Start(cmd); err == nil {
		t.Fatal("starting a missing binary succeeded")
	}
}
