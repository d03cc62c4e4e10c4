package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/sockets"
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

// With --logs, a process's whole standard error is kept (not only the tail used in
// error messages), one private file per start, and the lab's hubs log at debug level.
func TestKeepLogs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	if err := KeepLogs(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { KeepLogs("") })
	// 20,000 lines: far more than the 8 KiB tail.
	script := `i=0; while [ $i -lt 20000 ]; do echo "line $i" >&2; i=$((i+1)); done`
	for range 2 {
		p, err := StartProc("gw 1/hub", nil, "sh", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		<-p.done
	}
	for _, name := range []string{"gw_1_hub.log", "gw_1_hub.2.log"} {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Count(string(b), "\n"); lines != 20000 || !strings.HasPrefix(string(b), "line 0\n") {
			t.Fatalf("%s has %d lines, starting %.20q", name, lines, b)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v", name, fi.Mode().Perm())
		}
	}
	cfgDir := t.TempDir()
	if err := writeLabHubConfig(cfgDir, sockets.Config{CIDR: "10.9.0.0/16"}, IoTsafeOpts{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(cfgDir, "hub.yaml")); !strings.Contains(string(b), "level: debug") {
		t.Fatalf("a lab hub's configuration with logs kept:\n%s", b)
	}
}

// A port a restarted server keeps is below the ephemeral range, where no outgoing
// connection can take it between two starts.
func TestStablePortIsBelowTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ip_local_port_range here:", err)
	}
	lo, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	port, err := StablePort()
	if err != nil {
		t.Fatal(err)
	}
	if lo > 11000 && (port < 10000 || port >= lo) {
		t.Fatalf("port %d is not between 10000 and the ephemeral range's start %d", port, lo)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d is not free: %v", port, err)
	}
	ln.Close()
}
