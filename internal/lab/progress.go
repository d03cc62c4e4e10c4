package lab

import (
	"fmt"
	"io"
	"time"
)

// Progress reports long runs on a terminal (a bar) or a log (a line per step).
type Progress struct {
	W     io.Writer
	TTY   bool
	total int
	done  int
	start time.Time
}

func (p *Progress) Start(total int) {
	if p == nil {
		return
	}
	p.total, p.done, p.start = total, 0, time.Now()
}

func (p *Progress) Step(msg string) {
	if p == nil || p.W == nil {
		return
	}
	p.done++
	if p.TTY {
		const width = 30
		fill := width * p.done / max(p.total, 1)
		fmt.Fprintf(p.W, "\r\033[K[%s%s] %d/%d %s  %s", bar(fill, '#'), bar(width-fill, '.'), p.done, p.total, time.Since(p.start).Round(time.Second), msg)
		return
	}
	fmt.Fprintf(p.W, "[%d/%d %s] %s\n", p.done, p.total, time.Since(p.start).Round(time.Second), msg)
}

// Note prints a line that is not a step (on a terminal, above the bar).
func (p *Progress) Note(msg string) {
	if p == nil || p.W == nil {
		return
	}
	if p.TTY {
		fmt.Fprint(p.W, "\r\033[K")
	}
	fmt.Fprintln(p.W, msg)
}

func (p *Progress) Done() {
	if p != nil && p.TTY && p.W != nil {
		fmt.Fprintln(p.W)
	}
}

func bar(n int, c byte) string {
	b := make([]byte, max(n, 0))
	for i := range b {
		b[i] = c
	}
	return string(b)
}
