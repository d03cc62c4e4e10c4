package lab

import (
	"context"
	"net"
	"strings"
	"testing"
)

// A lab server whose port another process took first is not measured (issue 52.10): the
// port answers, but not from the process the lab started.
func TestWaitTCPRefusesAPortAnotherProcessHolds(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0") // the "demo's app"
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p, err := StartProc("would-be-server", nil, "sleep", "30") // never binds
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	err = WaitTCP(context.Background(), p, other.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "from a process the lab did not start") {
		t.Fatalf("WaitTCP on a port this test holds: %v", err)
	}
	// The port's owner is found where it is: this process.
	if owned, known := listenerOwner(p.PID(), other.Addr().String()); !known || owned {
		t.Fatalf("sleep owns the test's port? owned %v known %v", owned, known)
	}
}

func TestParseProcAddr(t *testing.T) {
	ip, port, ok := parseProcAddr("0100007F:1F90")
	if !ok || !ip.Equal(net.ParseIP("127.0.0.1")) || port != 8080 {
		t.Fatalf("v4: %v %d %v", ip, port, ok)
	}
	ip, port, ok = parseProcAddr("00000000000000000000000001000000:0016")
	if !ok || !ip.Equal(net.ParseIP("::1")) || port != 22 {
		t.Fatalf("v6: %v %d %v", ip, port, ok)
	}
	if _, _, ok := parseProcAddr("zz:1"); ok {
		t.Fatal("garbage parsed")
	}
}
