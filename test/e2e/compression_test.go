package e2e

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// With a profile that allows it, the agent and the hub compress every forwarded
// connection of the session in one shared context: repeated requests shrink, both
// forward directions work, the device's source address is kept, and the hub's policy
// still decides each stream.
func TestCompressedSession(t *testing.T) {
	h := startHub(t, "", "")
	target := echoSource(t)
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: zipped\nreverse: {http: 0}\ndirect: {broker: %q}\ncompression: true\n", target))
	key := h.addDevice("dev1", "--profile", prof)
	app := deviceApp(t, "sensor reading 21.5")
	fwd, bad := freePort(t), freePort(t)
	a := startAgent(t, h, key, "--compress", "--expose", "http="+hostPortOf(app), "--forward", fwd+"=broker", "--forward", bad+"=database")
	a.stderr.wait(t, "session up")
	a.stderr.wait(t, "compression on")
	h.log.wait(t, "multiplexed channel open", "device", "dev1", "mode", "deflate")
	if out := h.mustCLI("device", "show", "dev1"); !strings.Contains(out, "one multiplexed channel, compressed (deflate)") {
		t.Fatalf("device show does not say the session is compressed:\n%s", out)
	}

	// Reverse: curl through the protected socket, many times (same headers each time).
	for range 20 {
		mustGet(t, h.socket("dev1", "http"), "sensor reading 21.5")
	}
	// Direct: the target sees the device's own pool address, as without compression.
	if got, want := readLine(t, fwd), h.device("dev1").Address; got != want {
		t.Fatalf("direct forward: target saw source %s, want %s", got, want)
	}
	// A direct alias outside the profile is refused inside the compressed channel too:
	// the local connection is closed and the violation recorded.
	refusedLocally(t, bad, "a forward to an alias outside the profile")
	h.log.wait(t, "profile violation", "device", "dev1")
	if ev := h.events("dev1", "violation"); len(ev) == 0 || !strings.Contains(ev[len(ev)-1].Detail, `"database"`) {
		t.Fatalf("violation events: %+v", ev)
	}
	// The session survives the refusal.
	mustGet(t, h.socket("dev1", "http"), "sensor reading 21.5")

	// At the end the hub reports what the context saved: twenty curl requests with the
	// same headers went to the device in far fewer bytes than they had. The device going
	// away is not a violation (its deflate stream simply stops).
	violations := len(h.events("dev1", "violation"))
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.waitExit(t)
	h.log.wait(t, "multiplexed channel closed", "device", "dev1")
	h.log.wait(t, "session closed", "device", "dev1")
	if n := len(h.events("dev1", "violation")); n != violations {
		t.Fatalf("the device disconnecting recorded %d violation(s)", n-violations)
	}
	m := h.log.last("multiplexed channel closed", "device", "dev1")
	raw, wire := m["raw_out"].(float64), m["wire_out"].(float64)
	if raw == 0 || wire*2 > raw {
		t.Fatalf("hub to device: %v raw bytes sent as %v: the shared context did not compress repeated requests", raw, wire)
	}
}

// A profile without compression declines the agent's request; the session goes on
// uncompressed, multiplexed (the agent's default), or with plain channels when the agent
// was told --multiplex=false. Stock OpenSSH with -C keeps working against a profile that
// allows compression (x/crypto negotiates no SSH compression; nothing breaks).
func TestCompressionDeclinedAndStockClients(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "plain session")
	a := startAgent(t, h, key, "--compress", "--multiplex=false", "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "hub declined compression; going on without it")
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "http"), "plain session")
	if n := h.log.count("multiplexed channel open"); n != 0 {
		t.Fatal("a declined compression request still opened a multiplexed channel")
	}
	if out := h.mustCLI("device", "show", "dev1"); !regexp.MustCompile(`forwarding +one SSH channel per connection`).MatchString(out) {
		t.Fatalf("device show does not say the session uses a channel per connection:\n%s", out)
	}

	target := echoSource(t)
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: muxed\nreverse: {http: 0}\ndirect: {broker: %q}\n", target))
	key3 := h.addDevice("dev3", "--profile", prof)
	fwd := freePort(t)
	a3 := startAgent(t, h, key3, "--compress", "--expose", "http="+hostPortOf(app), "--forward", fwd+"=broker")
	a3.stderr.wait(t, "hub declined compression; going on without it")
	a3.stderr.wait(t, "multiplexing on")
	a3.stderr.wait(t, "session up")
	h.log.wait(t, "multiplexed channel open", "device", "dev3", "mode", "none")
	if out := h.mustCLI("device", "show", "dev3"); !regexp.MustCompile(`forwarding +one multiplexed channel, uncompressed`).MatchString(out) {
		t.Fatalf("device show does not say the session is multiplexed:\n%s", out)
	}
	mustGet(t, h.socket("dev3", "http"), "plain session")
	if got, want := readLine(t, fwd), h.device("dev3").Address; got != want {
		t.Fatalf("multiplexed direct forward: target saw source %s, want %s", got, want)
	}
	if n := h.log.count("profile violation"); n != 0 {
		t.Fatalf("declined compression counted as %d violation(s)", n)
	}

	prof2 := writeProfile(t, t.TempDir(), "name: zipped\nreverse: {http: 0}\ncompression: true\n")
	key2 := h.addDevice("dev2", "--profile", prof2)
	app2 := deviceApp(t, "stock ssh -C")
	_, port, _ := net.SplitHostPort(hostPortOf(app2))
	startProc(t, "ssh", append(sshArgs(h, key2), "-C", "-R", "http:0:127.0.0.1:"+port, "dev2@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev2")
	mustGet(t, h.socket("dev2", "http"), "stock ssh -C")
}

// Streams in the multiplexed channel obey the profile's limits like channels: one over
// max_channels is refused and recorded, and a device that keeps opening refused streams
// loses its session, as with refused channel opens.
func TestMultiplexedLimits(t *testing.T) {
	h := startHub(t, "", "")
	held := make(chan net.Conn, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // kept open: the stream stays
		}
	}()
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: one\nreverse: {http: 0}\ndirect: {broker: %q}\nmax_channels: 1\n", ln.Addr().String()))
	key := h.addDevice("dev1", "--profile", prof)
	fwd, bad := freePort(t), freePort(t)
	a := startAgent(t, h, key, "--forward", fwd+"=broker", "--forward", bad+"=nowhere")
	a.stderr.wait(t, "multiplexing on")
	a.stderr.wait(t, "session up")

	first, err := net.Dial("tcp", fwd)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	first.Write([]byte("hello")) // the stream opens with its first data
	c := <-held
	defer c.Close()

	refusedLocally(t, fwd, "a stream over max_channels")
	h.log.wait(t, "profile violation", "device", "dev1")
	if ev := h.events("dev1", "violation"); len(ev) == 0 || !strings.Contains(ev[0].Detail, "over the limit of 1 open channels") {
		t.Fatalf("violation events: %+v", ev)
	}

	// Refused streams, over and over: the hub ends the session (32 by default).
	for range 40 {
		refusedLocally(t, bad, "a stream to an alias outside the profile")
		if h.log.count("session closed", "device", "dev1", "why", "too many refused channel opens or forward requests") > 0 {
			break
		}
	}
	h.log.wait(t, "session closed", "device", "dev1", "why", "too many refused channel opens or forward requests")
}

// refusedLocally connects to an agent's --forward port whose stream the hub refuses and
// checks that the local connection ends without a byte. The agent resets it when the
// refusal arrives, which can be before the dial has returned here: a reset dial counts.
func refusedLocally(t *testing.T, addr, what string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if err != nil {
		t.Fatalf("%s: dial %s: %v", what, addr, err)
	}
	defer c.Close()
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("%s read %d bytes", what, n)
	}
}
