package e2e

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// churnDuration is how long TestChurnKeepsTheHubUp churns; IOTSAFE_CHURN (a Go
// duration) changes it. The longer soak with figures is 'iotsafe bench churn'.
func churnDuration(t *testing.T) time.Duration {
	if v := os.Getenv("IOTSAFE_CHURN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("IOTSAFE_CHURN=%q: %v", v, err)
		}
		return d
	}
	return 45 * time.Second
}

// churnDevice is one device of the churn: its key, how its agent runs, and the agent
// running now (nil while it is down).
type churnDevice struct {
	name string
	key  string
	args []string

	mu      sync.Mutex
	agent   *proc
	stopped bool // SIGSTOPped
}

// Issue 56's class of crash must not land again: a fleet of real agents (multiplexed,
// with a channel each, compressed; one device's application down, so its every
// connection is refused mid-open) is churned for about a minute: agents SIGKILLed and
// restarted, SIGSTOPped and resumed, replaced by a new agent while the old one hangs
// (takeover), while requests go through every device. The hub must stay up, contain no
// panic, and at the end every device must answer again through its protected socket.
// Nothing here measures time; the figures are 'iotsafe bench churn's.
func TestChurnKeepsTheHubUp(t *testing.T) {
	h := startHub(t, "", "")
	prof := writeProfile(t, t.TempDir(), "name: churn\nreverse: {http: 80}\ncompression: true\nmax_channels: 8\n")
	const n = 9
	kinds := [][]string{nil, {"--multiplex=false"}, {"--compress"}}
	var devices []*churnDevice
	for i := range n {
		d := &churnDevice{name: fmt.Sprintf("churn-%d", i)}
		d.key = h.addDevice(d.name, "--profile", prof)
		target := newDeadTarget(t).addr // nothing listens there: this device refuses every open
		if i != 0 {
			target = hostPortOf(deviceApp(t, d.name))
		}
		d.args = append([]string{"--expose", "http=" + target}, kinds[i%len(kinds)]...)
		devices = append(devices, d)
	}
	start := func(d *churnDevice) *proc {
		a := startAgent(t, h, d.key, d.args...)
		d.mu.Lock()
		d.agent, d.stopped = a, false
		d.mu.Unlock()
		return a
	}
	for _, d := range devices {
		start(d).stderr.wait(t, "session up")
	}
	sockets := map[string]string{}
	for _, d := range devices {
		sockets[d.name] = h.socket(d.name, "http")
	}

	// Requests through every device all along, bounded by the churn's end.
	stop := make(chan struct{})
	var requests, answered atomic.Int64
	var load sync.WaitGroup
	for _, d := range devices {
		load.Add(1)
		go func() {
			defer load.Done()
			c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				requests.Add(1)
				if resp, err := c.Get("http://" + sockets[d.name] + "/"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						answered.Add(1)
					}
				}
			}
		}()
	}

	seed := rand.Uint64()
	t.Logf("churn seed %d (actions are drawn from it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	actions := map[string]int{}
	deadline := time.Now().Add(churnDuration(t))
	for time.Now().Before(deadline) {
		d := devices[rng.IntN(n)]
		d.mu.Lock()
		a, stopped := d.agent, d.stopped
		d.mu.Unlock()
		switch action := rng.IntN(4); {
		case stopped:
			a.cmd.Process.Signal(syscall.SIGCONT)
			d.mu.Lock()
			d.stopped = false
			d.mu.Unlock()
			actions["resumed"]++
		case action == 0 || action == 1:
			// Killed at any point, often while the hub opens one of its connections.
			a.cmd.Process.Kill()
			<-a.exited
			start(d)
			actions["killed and restarted"]++
		case action == 2:
			a.cmd.Process.Signal(syscall.SIGSTOP)
			d.mu.Lock()
			d.stopped = true
			d.mu.Unlock()
			actions["stopped"]++
		default:
			// Takeover: the old agent hangs, a new one comes; the old one is killed once
			// the new one is up (or gave up waiting), so one agent serves each device.
			a.cmd.Process.Signal(syscall.SIGSTOP)
			b := start(d)
			select {
			case <-b.stderr.seen("session up"):
			case <-time.After(10 * time.Second): // a guard, not a measurement
			}
			a.cmd.Process.Kill()
			<-a.exited
			actions["taken over"]++
		}
		if h.log.ended() {
			t.Fatalf("the hub exited during the churn; its log:\n%s", h.log.tail(60))
		}
		// The pace of the churn (not a wait for anything): a few actions a second.
		time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
	}
	close(stop)
	load.Wait()
	t.Logf("churn: %v; %d requests, %d answered", actions, requests.Load(), answered.Load())

	// Every device with a fresh agent: the hub takes over whatever the churn left and
	// serves each one again.
	for _, d := range devices {
		d.mu.Lock()
		a := d.agent
		d.mu.Unlock()
		a.cmd.Process.Signal(syscall.SIGCONT)
		a.cmd.Process.Kill()
		<-a.exited
		start(d).stderr.wait(t, "session up")
	}
	for i, d := range devices {
		if i == 0 {
			curlRefused(t, sockets[d.name])
			continue
		}
		mustGet(t, sockets[d.name], d.name)
	}
	if h.log.ended() {
		t.Fatalf("the hub exited; its log:\n%s", h.log.tail(60))
	}
	if n := h.log.count("panic contained: one connection closed, the hub goes on"); n != 0 {
		t.Fatalf("%d panics contained during the churn: a bug (its stack is in the hub's log)", n)
	}
}
