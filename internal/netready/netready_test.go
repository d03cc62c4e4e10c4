package netready

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/nettest"
)

func poller(t *testing.T) *Poller {
	t.Helper()
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// watch registers c; each wake sends on the returned channel.
func watch(t *testing.T, c syscall.Conn) (*Wait, chan struct{}) {
	t.Helper()
	woke := make(chan struct{}, 16)
	w, err := poller(t).Watch(c, func() { woke <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w, woke
}

func TestInputWakesAnArmedWait(t *testing.T) {
	c, peer := nettest.TCPPair(t)
	w, woke := watch(t, c)
	if err := w.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	peer.Write([]byte("x"))
	<-woke
	// The wake is for reading: the byte is there, and nothing else is due until the
	// next Arm.
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	peer.Write([]byte("y"))
	if err := w.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	<-woke
}

func TestInputAlreadyThereWakesAtOnce(t *testing.T) {
	c, peer := nettest.TCPPair(t)
	// On loopback the bytes are in c's socket once Write returns.
	peer.Write([]byte("early"))
	w, woke := watch(t, c)
	if err := w.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	<-woke
	buf := make([]byte, 5)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "early"[:n] {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

func TestPeerHangUpWakes(t *testing.T) {
	c, peer := nettest.TCPPair(t)
	w, woke := watch(t, c)
	if err := w.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	<-woke
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a read after the peer hung up succeeded")
	}
}

func TestDeadlineWakes(t *testing.T) {
	c, _ := nettest.TCPPair(t)
	w, woke := watch(t, c)
	deadline := time.Now().Add(20 * time.Millisecond)
	c.SetReadDeadline(deadline)
	if err := w.Arm(deadline); err != nil {
		t.Fatal(err)
	}
	<-woke
	// Woken at the deadline: the read fails as a Read parked until then would have.
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read after the deadline wake: %v, want a timeout", err)
	}
}

func TestAMovedDeadlineDoesNotWakeEarly(t *testing.T) {
	c, peer := nettest.TCPPair(t)
	w, woke := watch(t, c)
	if err := w.Arm(time.Now().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	<-woke
	// Re-armed with a deadline far away: the first arm's timer is spent, and the wake
	// that comes is the input's.
	if err := w.Arm(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	peer.Write([]byte("x"))
	<-woke
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("woken by input, but: %v", err)
	}
}

func TestWakeWakesOnlyAnArmedWait(t *testing.T) {
	c, peer := nettest.TCPPair(t)
	w, woke := watch(t, c)
	w.Wake() // not armed: nothing
	if err := w.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	w.Wake()
	<-woke
	w.Wake() // woken already: nothing more
	peer.Write([]byte("x"))
	if err := w.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	<-woke
	w.Stop()
	if len(woke) != 0 {
		t.Fatalf("%d wakes more than arms", len(woke))
	}
}

func TestArmFailsOnAClosedConnectionAndAfterStop(t *testing.T) {
	c, _ := nettest.TCPPair(t)
	w, _ := watch(t, c)
	c.Close()
	if err := w.Arm(time.Time{}); err == nil {
		t.Fatal("armed a closed connection")
	}
	c2, _ := nettest.TCPPair(t)
	w2, _ := watch(t, c2)
	w2.Stop()
	if err := w2.Arm(time.Time{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Arm after Stop: %v, want ErrStopped", err)
	}
}

// A descriptor number that a closed connection gave back and a new one took: the old
// Wait must not touch the new connection's registration.
func TestAClosedConnectionsWaitLeavesItsSuccessorAlone(t *testing.T) {
	c, _ := nettest.TCPPair(t)
	old, _ := watch(t, c)
	if err := old.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2, peer2 := nettest.TCPPair(t)
	w2, woke2 := watch(t, c2)
	if err := w2.Arm(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := old.Arm(time.Time{}); err == nil {
		t.Fatal("armed a closed connection")
	}
	old.Stop()
	peer2.Write([]byte("x"))
	<-woke2
}

func TestManyConnectionsEachWokenOnce(t *testing.T) {
	const n = 200
	var wakes [n]atomic.Int32
	all := make(chan int, n)
	peers := make([]net.Conn, n)
	for i := range n {
		c, peer := nettest.TCPPair(t)
		peers[i] = peer
		w, err := poller(t).Watch(c, func() { wakes[i].Add(1); all <- i })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		if err := w.Arm(time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range peers {
		p.Write([]byte("x"))
	}
	for range n {
		<-all
	}
	for i := range n {
		if got := wakes[i].Load(); got != 1 {
			t.Fatalf("connection %d woken %d times", i, got)
		}
	}
}
