package sshd

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// ChannelWorstCase is what one forwarded connection may hold in the hub's memory when
// its local reader stalls: x/crypto's fixed 2 MiB channel window plus buffers (measured
// 2.45 MB; a multiplexed stream holds its announced window, 2 MiB with framing version
// 2 or 256 KiB with version 1, plus 32 KiB, and is counted the same, to keep one simple
// bound).
const ChannelWorstCase = 5 << 19 // 2.5 MiB

// forwardBudget bounds the forwarded connections open hub-wide so that stalled readers
// cannot take more than the configured memory.
type forwardBudget struct {
	max  int64
	open atomic.Int64
}

func newForwardBudget(mib int) *forwardBudget {
	return &forwardBudget{max: max(1, int64(mib)<<20/ChannelWorstCase)}
}

func (b *forwardBudget) take() bool {
	if b.open.Add(1) > b.max {
		b.open.Add(-1)
		return false
	}
	return true
}

func (b *forwardBudget) give() { b.open.Add(-1) }

// defaultForwardMemoryMiB is half of the machine's memory, or 4 GiB if it cannot be read.
func defaultForwardMemoryMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 4096
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err == nil && kb > 0 {
				return kb / 1024 / 2
			}
		}
	}
	return 4096
}
