package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A stock OpenSSH client is an agent with no change: -R ALIAS:PORT:HOST:PORT.
func TestStockOpenSSHReverseForward(t *testing.T) {
	needTool(t, "ssh")
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "hello from dev1")
	startProc(t, "ssh", append(sshArgs(h, key), "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")...)
	h.log.wait(t, "reverse forward open", "device", "dev1")
	mustGet(t, h.socket("dev1", "http"), "hello from dev1")

	d := h.device("dev1")
	if !d.Online || d.LastAlgos == nil || !strings.Contains(d.LastAlgos.Client, "OpenSSH") || d.LastAlgos.Kex == "" {
		t.Fatalf("device show does not report the negotiated session: %+v", d)
	}
}

// Dropbear's dbclient works the same way.
func TestDropbearReverseForward(t *testing.T) {
	needTool(t, "dbclient")
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	dbKey, home := dropbearClient(t, h, key)
	app := deviceApp(t, "hello from dropbear")
	startProcEnv(t, []string{"HOME=" + home}, "dbclient", "-N", "-i", dbKey, "-p", h.port, "-R", "http:80:"+hostPortOf(app), "dev1@127.0.0.1")
	h.log.wait(t, "reverse forward open", "device", "dev1")
	mustGet(t, h.socket("dev1", "http"), "hello from dropbear")
	if c := h.device("dev1").LastAlgos.Client; !strings.Contains(c, "dropbear") {
		t.Fatalf("client version %q", c)
	}
}

// dropbearClient converts an OpenSSH private key for dbclient and makes a HOME whose
// known_hosts pins the hub (dbclient reads ~/.ssh/known_hosts only; Dropbear 2022.83
// matches entries by host name, without the [host]:port form).
func dropbearClient(t *testing.T, h *hubProc, key string) (dbKey, home string) {
	t.Helper()
	dbKey = key + ".dropbear"
	if out, err := exec.Command(needTool(t, "dropbearconvert"), "openssh", "dropbear", key, dbKey).CombinedOutput(); err != nil {
		t.Fatalf("dropbearconvert: %v\n%s", err, out)
	}
	home = t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte("127.0.0.1 "+h.hostPK+"\n"), 0o600)
	return dbKey, home
}

// echoSource is a hub-side TCP service that answers each connection with the peer address.
func echoSource(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s\n", host)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func readLine(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

func writeProfile(t *testing.T, dir, yaml string) string {
	p := filepath.Join(dir, "profile.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Direct forwards reach their target from the device's pool address: through the agent
// (multiplexed by default, and with a channel per connection) and through stock ssh -L.
func TestDirectForwardUsesDeviceSourceAddress(t *testing.T) {
	h := startHub(t, "", "")
	target := echoSource(t)
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\nreverse: {http: 0}\ndirect: {broker: %q}\n", target))
	k1 := h.addDevice("dev1", "--profile", prof)
	k2 := h.addDevice("dev2", "--profile", "sensor")

	l1 := freePort(t)
	a := startAgent(t, h, k1, "--forward", l1+"=broker")
	a.stderr.wait(t, "session up")
	if got, want := readLine(t, l1), h.device("dev1").Address; got != want {
		t.Fatalf("agent: target saw source %s, want dev1's address %s", got, want)
	}

	// The same with one SSH channel per connection instead of the multiplexed channel.
	k3 := h.addDevice("dev3", "--profile", "sensor")
	l3 := freePort(t)
	a3 := startAgent(t, h, k3, "--multiplex=false", "--forward", l3+"=broker")
	a3.stderr.wait(t, "session up")
	if got, want := readLine(t, l3), h.device("dev3").Address; got != want {
		t.Fatalf("agent --multiplex=false: target saw source %s, want dev3's address %s", got, want)
	}
	if n := h.log.count("multiplexed channel open", "device", "dev3"); n != 0 {
		t.Fatal("agent --multiplex=false opened a multiplexed channel")
	}

	l2 := freePort(t)
	_, port2, _ := net.SplitHostPort(l2)
	// ssh binds its -L listener after the session is up. Its "Local forwarding listening"
	// line comes before bind and listen (OpenSSH channels.c); the listener's channel is
	// logged only once it listens, and with one bind address there is exactly one.
	ssh := startProc(t, "ssh", append(sshArgs(h, k2), "-v", "-L", "127.0.0.1:"+port2+":broker:1883", "dev2@127.0.0.1")...)
	ssh.stderr.waitText(t, "Local forwarding listening on 127.0.0.1 port "+port2)
	ssh.stderr.waitText(t, "new port-listener [port listener]")
	if got, want := readLine(t, l2), h.device("dev2").Address; got != want {
		t.Fatalf("ssh -L: target saw source %s, want dev2's address %s", got, want)
	}
}

// The iotsafe agent exposes a service and 'iotsafe connect' reaches it.
func TestAgentExposeAndConnect(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "sensor reading 21.5")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "http"), "sensor reading 21.5")

	cmd := exec.Command(iotsafeBin, "connect", "dev1", "http", "--data", h.data)
	cmd.Stdin = strings.NewReader("GET / HTTP/1.0\r\n\r\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "sensor reading 21.5") || !strings.HasPrefix(string(out), "HTTP/1.0 200") {
		t.Fatalf("connect: %v\n%s", err, out)
	}
	out2, err := exec.Command(iotsafeBin, "connect", "dev1", "ftp", "--data", h.data).CombinedOutput()
	if err == nil || !strings.Contains(string(out2), "has no service ftp") {
		t.Fatalf("connect to unknown alias: %v %s", err, out2)
	}
}

// The agent reads the same settings from a config file; flags override it.
func TestAgentConfigFile(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	app := deviceApp(t, "from config file")
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("hub: %s\nkey: %s\nhub_key: %s\nexpose: [\"http=%s\"]\nlog: {level: debug, format: json}\n", h.addr, key, h.hostFP, hostPortOf(app))), 0o600)
	a := startProc(t, iotsafeBin, "agent", "--agent-config", cfg)
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "http"), "from config file")
	h.log.wait(t, "multiplexed channel open", "device", "dev1") // the default

	// multiplex: false in the file turns the default off; the flag overrides the file.
	key2 := h.addDevice("dev2")
	cfg2 := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(cfg2, []byte(fmt.Sprintf("hub: %s\nkey: %s\nhub_key: %s\nexpose: [\"http=%s\"]\nmultiplex: false\nlog: {format: json}\n", h.addr, key2, h.hostFP, hostPortOf(app))), 0o600)
	a2 := startProc(t, iotsafeBin, "agent", "--agent-config", cfg2)
	a2.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev2", "http"), "from config file")
	if n := h.log.count("multiplexed channel open", "device", "dev2"); n != 0 {
		t.Fatal("multiplex: false in the agent's config file still multiplexed")
	}
	a2.cmd.Process.Signal(syscall.SIGTERM)
	a2.waitExit(t)
	h.log.wait(t, "session closed", "device", "dev2")
	a3 := startProc(t, iotsafeBin, "agent", "--agent-config", cfg2, "--multiplex")
	a3.stderr.wait(t, "session up")
	h.log.wait(t, "multiplexed channel open", "device", "dev2")

	os.WriteFile(cfg, []byte("hub: x\nexpsoe: []\n"), 0o600)
	out, err := exec.Command(iotsafeBin, "agent", "--agent-config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "expsoe") {
		t.Fatalf("typo in agent config: %v %s", err, out)
	}
}
