package e2e

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deadTarget is a loopback port where nothing listens (a device application that is
// down), and a way to start its application there later.
type deadTarget struct {
	t    *testing.T
	addr string
}

func newDeadTarget(t *testing.T) *deadTarget { return &deadTarget{t: t, addr: freePort(t)} }

// up starts the device's application on the target's port.
func (d *deadTarget) up(body string) {
	d.t.Helper()
	ln, err := net.Listen("tcp", d.addr)
	if err != nil {
		d.t.Fatalf("the device's application cannot take its port back: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) }), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	d.t.Cleanup(func() { srv.Close() })
}

// refusedTries is more than the profile's max_channels: a leaked channel slot would
// turn the last refusals into "channel limit reached".
const (
	deviceEndMaxChannels = 2
	refusedTries         = 2*deviceEndMaxChannels + 1
)

// curlRefused fetches through a protected socket whose device cannot serve: curl must
// fail (the hub closes the connection) rather than hang or get an answer.
func curlRefused(t *testing.T, sock string) {
	t.Helper()
	if out, err := httpGet(t, sock); err == nil {
		t.Fatalf("GET through %s answered %q from a device whose service is down", sock, out)
	}
}

// Issue 56: a device whose service is down (its end of a forwarded connection cannot
// open) crashed the whole hub. With every kind of device client: the person's
// connection is closed, each refusal is logged once, the channel slots come back, and
// the hub goes on serving: the device's application back, the same request answers.
func TestDeviceWhoseServiceIsDownIsRefusedCleanly(t *testing.T) {
	needTool(t, "ssh")
	needTool(t, "dbclient")
	h := startHub(t, "", "")
	prof := writeProfile(t, t.TempDir(), "name: small\nreverse: {http: 80}\ncompression: true\nmax_channels: 2\n")
	clients := []struct {
		name  string
		start func(key string, target *deadTarget, device string)
	}{
		{"openssh", func(key string, target *deadTarget, device string) {
			startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+target.addr, device+"@127.0.0.1")...)
		}},
		{"dropbear", func(key string, target *deadTarget, device string) {
			dbKey, home := dropbearClient(t, h, key)
			startProcEnv(t, []string{"HOME=" + home}, "dbclient", "-N", "-i", dbKey, "-p", h.port, "-R", "http:80:"+target.addr, device+"@127.0.0.1")
		}},
		{"agent-multiplexed", func(key string, target *deadTarget, _ string) {
			startAgent(t, h, key, "--expose", "http="+target.addr)
		}},
		{"agent-channels", func(key string, target *deadTarget, _ string) {
			startAgent(t, h, key, "--multiplex=false", "--expose", "http="+target.addr)
		}},
		{"agent-compressed", func(key string, target *deadTarget, _ string) {
			startAgent(t, h, key, "--compress", "--expose", "http="+target.addr)
		}},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			device := "dev-" + c.name
			key := h.addDevice(device, "--profile", prof)
			target := newDeadTarget(t)
			c.start(key, target, device)
			h.log.wait(t, "reverse forward open", "device", device)
			sock := h.socket(device, "http")
			for range refusedTries {
				curlRefused(t, sock)
			}
			// A multiplexed refusal is logged once the stream's reset arrived, which
			// may be after curl saw its connection close.
			h.log.waitN(t, refusedTries, "device refused forwarded connection", "device", device, "event", "forward_refused")
			if n := h.log.count("device refused forwarded connection", "device", device); n != refusedTries {
				t.Errorf("%d refusals logged for %d refused connections", n, refusedTries)
			}
			if n := h.log.count("channel limit reached; refusing local connection", "device", device); n != 0 {
				t.Errorf("channel slots leaked: the limit of %d was hit %d times", deviceEndMaxChannels, n)
			}
			target.up("back from " + device)
			mustGet(t, sock, "back from "+device)
			if h.log.ended() {
				t.Fatalf("the hub exited; its log:\n%s", h.log.tail(60))
			}
		})
	}
	if n := h.log.count("panic contained: one connection closed, the hub goes on"); n != 0 {
		t.Fatalf("%d panics contained", n)
	}
}

// The same through the front door: a person gets 502 with the reason, not a dropped
// connection, and the hub serves the device once its application is back.
func TestFrontdoorAnswers502ForADeviceWhoseServiceIsDown(t *testing.T) {
	h := startHub(t, "", "frontdoor:\n  listen: 127.0.0.1:0\n  domain: "+fdDomain+"\n")
	key := h.addDevice("dev42")
	target := newDeadTarget(t)
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+target.addr, "dev42@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev42")
	h.addAccount("alice", "alice-password-1")
	h.mustCLI("grant", "--account", "alice", "dev42", "http")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o600)
	host := "dev42." + fdDomain
	for range 3 {
		body, code, _ := fdCurl(t, h, ca, host, "-u", "alice:alice-password-1")
		if code != 502 {
			t.Fatalf("front door to a device whose service is down: %d %q, want 502", code, body)
		}
	}
	h.log.waitN(t, 3, "device refused forwarded connection", "device", "dev42")
	target.up("dev42 is back")
	if body, code, _ := fdCurl(t, h, ca, host, "-u", "alice:alice-password-1"); code != 200 || !strings.Contains(body, "dev42 is back") {
		t.Fatalf("after the application came back: %d %q", code, body)
	}
}

// A device behind a gateway whose service is down: the gateway resets the centre's
// stream, the person at the centre gets a closed connection, the centre logs each
// refusal once and goes on; the device's application back, the centre reaches it.
func TestGatewayDeviceWhoseServiceIsDownIsRefusedCleanly(t *testing.T) {
	p := startGatewayPair(t)
	key := p.gw.addDevice("cam-1")
	target := newDeadTarget(t)
	startAgent(t, p.gw, key, "--expose", "http="+target.addr)
	p.centre.log.wait(t, "device behind gateway up", "device", "cam-1")
	sock := p.centre.socket("cam-1", "http")
	for range refusedTries {
		curlRefused(t, sock)
	}
	p.centre.log.waitN(t, refusedTries, "device refused forwarded connection", "device", "cam-1", "event", "forward_refused")
	if n := p.centre.log.count("device refused forwarded connection", "device", "cam-1"); n != refusedTries {
		t.Errorf("the centre logged %d refusals for %d refused connections", n, refusedTries)
	}
	target.up("cam-1 is back")
	mustGet(t, sock, "cam-1 is back")
}
