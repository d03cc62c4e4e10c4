package lab

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A peer that prints thousands of lines before its readiness line is still heard (the
// fleet announces one line per forward).
func TestProcKeepsEveryLine(t *testing.T) {
	p, err := StartProc("printer", nil, "sh", "-c", "i=0; while [ $i -lt 5000 ]; do echo forward $i; i=$((i+1)); done; echo ready; sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5000 {
		got, err := p.ReadLine(ctx, "forward ")
		if err != nil || got != fmt.Sprint(i) {
			t.Fatalf("line %d: %q %v", i, got, err)
		}
	}
	if _, err := p.ReadLine(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
}

func TestProcExitBeforeReady(t *testing.T) {
	p, err := StartProc("quitter", nil, "sh", "-c", "echo hello; echo oops >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	_, err = p.ReadLine(context.Background(), "ready")
	if err == nil {
		t.Fatal("no error for a process that exited without saying ready")
	}
}

// TreeCPU sees the CPU time a process burnt, with better than tick resolution where the
// kernel has schedstat.
func TestTreeCPUCountsAChildsWork(t *testing.T) {
	p, err := StartProc("busy", nil, "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done; exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if _, err := p.ReadLine(context.Background(), "done"); err != nil {
		t.Fatal(err)
	}
	cpu, err := TreeCPU(p.PID())
	if err != nil || cpu <= 0 {
		t.Fatalf("cpu %v, %v", cpu, err)
	}
	if cpu%(10*time.Millisecond) == 0 {
		t.Logf("cpu %v is a whole number of ticks: schedstat may be unavailable here", cpu)
	}
}
