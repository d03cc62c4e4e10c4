package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once   sync.Once
	starts chan startReq
)

// Start starts cmd like cmd.Start, with SIGKILL as its parent-death signal (other
// SysProcAttr fields are kept).
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	once.Do(func() {
		starts = make(chan startReq)
		go forker()
	})
	req := startReq{cmd, make(chan error, 1)}
	starts <- req
	return <-req.done
}

// forker owns the thread every child is forked from. It is never unlocked and never
// returns, so the runtime never ends that thread.
func forker() {
	runtime.LockOSThread()
	for req := range starts {
		req.done <- req.cmd.Start()
	}
}
