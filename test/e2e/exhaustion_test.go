package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// exhaustedListener is one listener of the hub: its name in the "accept failed" log
// line, and a probe that succeeds once it serves.
type exhaustedListener struct {
	name, addr string
	serves     func() error
}

// Every listener of a fully configured hub survives running out of descriptors (issue
// 48, item 2): idle connections from many addresses fill the hub's descriptor table
// until each listener's accept fails, then they go, and each listener serves again
// (the admin socket too). The listeners come from the hub's ready file, so a listener
// added there without a probe here fails this test.
func TestEveryListenerSurvivesDescriptorExhaustion(t *testing.T) {
	needTool(t, "prlimit")
	h := startHubWith(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nrest: {listen: '127.0.0.1:0'}\nsoap: {enabled: true}\n"+
		"mqtt: {listen: '127.0.0.1:0', tls_listen: '127.0.0.1:0'}\nmetrics: {listen: '127.0.0.1:0'}\n", func(h *hubProc) {
		h.wrap = []string{"prlimit", "--nofile=512:512"}
	})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o600); err != nil {
		t.Fatal(err)
	}
	curl := func(args ...string) error {
		out, err := exec.Command(needTool(t, "curl"), append([]string{"-sS", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "200" {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	mqttRefuses := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, needTool(t, "mosquitto_pub"), append(args, "-i", "probe", "-u", "nobody", "-P", "x", "-t", "x", "-m", "y")...).CombinedOutput()
		if !strings.Contains(strings.ToLower(string(out)), "not authori") {
			return fmt.Errorf("want a CONNACK refusing the login: %v %s", err, out)
		}
		return nil
	}
	hp := func(addr string) []string {
		host, port := splitHostPort(t, addr)
		return []string{"-h", host, "-p", port}
	}
	listeners := []exhaustedListener{
		{"sshd", h.addr, func() error {
			_, port := splitHostPort(t, h.addr)
			out, err := exec.Command(needTool(t, "ssh-keyscan"), "-T", "60", "-p", port, "127.0.0.1").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ssh-") {
				return fmt.Errorf("ssh-keyscan: %v %s", err, out)
			}
			return nil
		}},
		{"front door", h.front, func() error {
			_, port := splitHostPort(t, h.front)
			return curl("--cacert", ca, "--resolve", fdDomain+":"+port+":127.0.0.1", "https://"+fdDomain+":"+port+"/api/rest/info")
		}},
		{"device plain", h.rest, func() error { return curl("http://" + h.rest + "/api/rest/info") }},
		{"mqtt plain", h.mqtt, func() error { return mqttRefuses(hp(h.mqtt)...) }},
		{"mqtt tls", h.mqttTLS, func() error {
			return mqttRefuses(append(hp(h.mqttTLS), "--cafile", ca, "--insecure")...)
		}},
		{"metrics", h.metrics, func() error { return curl("http://" + h.metrics + "/metrics") }},
	}
	checkEveryListenerCovered(t, h, listeners)

	// Fill the table: connections that never authenticate, each from its own address so
	// no per-source cap stops them first, round robin over the listeners, until every
	// listener has logged a failed accept.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	seen := map[string]<-chan struct{}{}
	for _, l := range listeners {
		seen[l.name] = h.log.seen("accept failed; retrying", "listener", l.name)
	}
	allFailed := func() bool {
		for _, ch := range seen {
			select {
			case <-ch:
			default:
				return false
			}
		}
		return true
	}
	for i := 0; !allFailed(); i++ {
		if i >= 5000 {
			t.Fatalf("5000 connections and not every listener ran out of descriptors; log:\n%s", h.log.text())
		}
		l := listeners[i%len(listeners)]
		src := &net.TCPAddr{IP: net.IPv4(127, 3, byte(i/250), byte(i%250+1))}
		d := net.Dialer{LocalAddr: src, Timeout: 30 * time.Second}
		c, err := d.DialContext(context.Background(), "tcp", l.addr)
		if err != nil {
			t.Fatalf("connection %d to %s: %v", i, l.name, err)
		}
		conns = append(conns, c)
	}
	t.Logf("%d connections filled the hub's descriptors", len(conns))
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	for _, l := range listeners {
		if err := l.serves(); err != nil {
			t.Errorf("%s does not serve after descriptors came back: %v", l.name, err)
		}
	}
	h.mustCLI("status") // the admin socket
	if h.log.ended() {
		t.Fatal("the hub died")
	}
}

// checkEveryListenerCovered fails when the hub's ready file names a listener the test
// has no probe for.
func checkEveryListenerCovered(t *testing.T, h *hubProc, ls []exhaustedListener) {
	t.Helper()
	covered := map[string]bool{}
	for _, l := range ls {
		covered[l.addr] = true
	}
	v := reflect.ValueOf(h.ready)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		s, ok := v.Field(i).Interface().(string)
		if !ok || s == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(s); err == nil && !covered[s] {
			t.Fatalf("the hub listens on %s (%s) and this test has no probe for it: add one", s, f.Name)
		}
	}
}

// closedByHub reads c until the hub closes it (a guard deadline only catches a hang).
func closedByHub(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: the hub did not close it: %v", what, err)
	}
}

// Connections that never log in cannot pile up on the broker (issue 48, item 2): one
// that never finishes TLS or never sends CONNECT is closed at connect_timeout, and one
// address holds at most max_unauthenticated_per_address of them; a client that logs in
// is not counted any more.
func TestMQTTConnectionsThatNeverLogIn(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\n"+
		"mqtt: {listen: '127.0.0.1:0', tls_listen: '127.0.0.1:0', connect_timeout: 1s, max_unauthenticated_per_address: 2}\n")
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Three from one address, none logging in: one is shed at once, the other two wait
	// for their deadline (the TLS one never finishes its handshake).
	idle := []net.Conn{dial(h.mqtt), dial(h.mqttTLS), dial(h.mqtt)}
	h.log.wait(t, "mqtt: too many connections that have not logged in yet; closing the new one", "event", "mqtt_connect_shed", "limit", "max_unauthenticated_per_address")
	for i, c := range idle {
		closedByHub(t, c, fmt.Sprintf("idle connection %d", i))
	}
	// The address is welcome again, and a client that speaks gets its answer.
	host, port := splitHostPort(t, h.mqtt)
	out, _ := exec.Command(needTool(t, "mosquitto_pub"), "-h", host, "-p", port, "-i", "probe", "-t", "x", "-m", "y").CombinedOutput()
	if !strings.Contains(strings.ToLower(string(out)), "not authori") {
		t.Fatalf("a client after the idle ones: %s", out)
	}
}
