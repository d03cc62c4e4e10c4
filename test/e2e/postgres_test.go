package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
)

// A deployment moves its registry from SQLite to a real PostgreSQL server and keeps
// working: the copy reports every table, the hub starts on PostgreSQL with every
// device's socket where it was, admin commands (which read the DSN from hub.yaml) act
// on the live hub, established sessions ride out a PostgreSQL restart, and a second
// hub on the same registry is refused with the first one named.
func TestRegistryOnPostgres(t *testing.T) {
	pg := pgscratch.Start(t)
	dsn := pg.Database(t)
	h := startHub(t, "", "rest: {listen: '127.0.0.1:0'}\n")
	key := h.addDevice("dev1")
	h.addDevice("dev2")
	// A notification in the hub's own telemetry.db moves with the registry.
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	stored := postNotification(t, h, "dev1", secret, "before the move")
	// So does the key that signed a device's refresh token.
	refresh := strings.TrimSpace(h.mustCLIStdout("device", "token", "dev1"))
	h.mustCLI("device", "revoke", "dev2", "--reason", "lost")
	app := deviceApp(t, "from dev1")
	a := startAgent(t, h, key, "--expose", "http="+hostPortOf(app))
	a.stderr.wait(t, "session up")
	sock := h.socket("dev1", "http")
	mustGet(t, sock, "from dev1")

	// The hub holds the data folder: the copy is refused until it stops.
	if out, err := h.cli("registry", "migrate", "--to", dsn); err == nil || !strings.Contains(out, "stop the hub") {
		t.Fatalf("migrate with the hub running: %v\n%s", err, out)
	}
	h.stop()
	out := h.mustCLI("registry", "migrate", "--to", dsn)
	for _, want := range []string{"devices         2 rows", "sockets         2 rows", "notifications   1 rows (ids kept)", "telemetry.db renamed telemetry.db.moved", "jwt-keys.json copied into the registry", "every table's count checked", "next: set  registry: {dsn:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("migrate output lacks %q:\n%s", want, out)
		}
	}
	// Into a database that holds a registry already: refused.
	if out, err := h.cli("registry", "migrate", "--to", dsn); err == nil || !strings.Contains(out, "not empty") {
		t.Fatalf("second migrate: %v\n%s", err, out)
	}

	cfg, _ := os.ReadFile(h.config)
	cfg = []byte(strings.Replace(string(cfg), "127.0.0.1:0", h.addr, 1) + "registry: {dsn: \"" + dsn + "\"}\n")
	os.WriteFile(h.config, cfg, 0o600)
	h.start()
	h.log.wait(t, "registry", "database", "postgres")
	a.stderr.waitN(t, 2, "session up")
	if got := h.socket("dev1", "http"); got != sock {
		t.Fatalf("socket moved with the registry: %s -> %s", sock, got)
	}
	mustGet(t, sock, "from dev1")
	var info struct {
		Database      string `json:"database"`
		Notifications int    `json:"notifications"`
		Tables        []struct {
			Table string `json:"table"`
			Rows  int    `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(h.mustCLIStdout("registry", "info", "-o", "json")), &info); err != nil || info.Database != "postgres" || info.Notifications != 1 {
		t.Fatalf("registry info: %+v %v", info, err)
	}
	if d := h.device("dev2"); d.Revoked == nil {
		t.Fatal("dev2's revocation was lost in the move")
	}
	// The notification is in the shared store now, under the same id.
	if got := listNotifications(t, h, "dev1", secret); len(got) != 1 || got[0]["id"] != stored["id"] || got[0]["notification"] != "before the move" {
		t.Fatalf("notifications after the move: %v, want %v", got, stored)
	}
	if _, err := os.Stat(filepath.Join(h.data, "telemetry.db")); !os.IsNotExist(err) {
		t.Fatalf("the hub on PostgreSQL made a telemetry.db of its own: %v", err)
	}
	if code, got, _ := restCall(t, plainClient, "POST", "http://"+h.rest+"/api/rest/token/refresh", "", map[string]string{"refreshToken": refresh}); code != 201 {
		t.Fatalf("a refresh token from before the move: %d %v", code, got)
	}
	// status finds a registry that is not in the data folder, and says where it is.
	st := h.mustCLIStdout("status")
	for _, want := range []string{"registry   ok, schema version", "postgres://postgres@/", "hubs       1 serving from the registry"} {
		if !strings.Contains(st, want) {
			t.Fatalf("status lacks %q:\n%s", want, st)
		}
	}

	// A PostgreSQL restart: the established session keeps serving, and the next admin
	// command works once the server is back.
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, sock, "from dev1")
	h.addDevice("dev3")

	// A second hub on the same registry is refused, naming the first.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "hub.yaml"), []byte("access: {kernel: off}\nssh: {listen: 127.0.0.1:0}\nregistry: {dsn: \""+dsn+"\"}\n"), 0o600)
	second, err := runRefused(t, iotsafeBin, "hub", "--data", other)
	if err == nil || !strings.Contains(string(second), "another hub named") || !strings.Contains(string(second), h.data) || !strings.Contains(string(second), "hub ") {
		t.Fatalf("second hub on the registry: %v\n%s", err, second)
	}

	// Revocation through PostgreSQL reaches the live session.
	out = h.mustCLI("device", "revoke", "dev1", "--reason", "stolen")
	if !strings.Contains(out, "closed 1 live session") {
		t.Fatalf("revoke:\n%s", out)
	}
	h.log.wait(t, "session closed", "device", "dev1", "why", "key revoked")

	// And back to a data folder: the notifications and the signing keys come along.
	refresh3 := strings.TrimSpace(h.mustCLIStdout("device", "token", "dev3"))
	h.stop()
	back := filepath.Join(t.TempDir(), "back")
	out = h.mustCLI("registry", "migrate", "--to", back)
	for _, want := range []string{"notifications   1 rows (ids kept)", "token signing keys written to " + back + "/jwt-keys.json"} {
		if !strings.Contains(out, want) {
			t.Fatalf("migrate back lacks %q:\n%s", want, out)
		}
	}
	os.WriteFile(filepath.Join(back, "hub.yaml"), []byte("log: {level: debug, format: json}\naccess: {kernel: off}\nrest: {listen: '127.0.0.1:0'}\nssh:\n  listen: 127.0.0.1:0\n"), 0o600)
	hb := startHub(t, back, "")
	if code, got, _ := restCall(t, plainClient, "POST", "http://"+hb.rest+"/api/rest/token/refresh", "", map[string]string{"refreshToken": refresh3}); code != 201 {
		t.Fatalf("a refresh token from PostgreSQL days at the hub on SQLite again: %d %v", code, got)
	}
	if fi, err := os.Stat(filepath.Join(back, "jwt-keys.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file written back: %v %v", fi, err)
	}
}

// startSharedHub starts hub name on the PostgreSQL registry dsn; the hubs of one
// registry share one pool, cidr (each test its own range).
func startSharedHub(t *testing.T, dsn, name, cidr, extra string) *hubProc {
	t.Helper()
	data := t.TempDir()
	cfg := fmt.Sprintf("log: {level: debug, format: json}\naccess: {kernel: off}\npool: {cidr: %s}\nregistry: {dsn: %q, hub_name: %s}\nrest: {listen: '127.0.0.1:0'}\n%sssh:\n  listen: 127.0.0.1:0\n", cidr, dsn, name, extra)
	if err := os.WriteFile(filepath.Join(data, "hub.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startHub(t, data, "")
}

// Two hubs share one PostgreSQL registry under their own names: a device with both
// hubs in its agent's list is recorded at the hub that holds its session, moves to the
// other when its hub is killed (same protected socket address, served again), and a
// revocation written through the dead hub's data folder reaches the live hub through
// the registry alone (LISTEN/NOTIFY).
func TestHubsShareAPostgresRegistry(t *testing.T) {
	dsn := pgscratch.Start(t).Database(t)
	hubNamed := func(name, extra string) *hubProc { return startSharedHub(t, dsn, name, "127.78.9.0/24", extra) }
	a, b := hubNamed("edge-a", ""), hubNamed("edge-b", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	key := a.addDevice("dev1")

	// One notification store for both: what dev2 stores at edge-a, edge-b lists under
	// the same id, and a long poll at edge-b from that cursor gets the next one edge-a
	// stores (whether it arrives before or after the poll begins).
	a.addDevice("dev2")
	secret := strings.TrimSpace(a.mustCLIStdout("device", "secret", "rotate", "dev2"))
	one := postNotification(t, a, "dev2", secret, "one")
	if got := listNotifications(t, b, "dev2", secret); len(got) != 1 || got[0]["id"] != one["id"] {
		t.Fatalf("edge-b lists %v, want edge-a's %v", got, one)
	}
	polled := make(chan []any, 1)
	go func() {
		_, _, got := restCall(t, plainClient, "GET", "http://"+b.rest+"/api/rest/device/dev2/notification/poll?waitTimeout=60&timestamp="+url.QueryEscape(one["timestamp"].(string)), deviceBearer(t, b, "dev2", secret), nil)
		polled <- got
	}()
	two := postNotification(t, a, "dev2", secret, "two")
	if got := <-polled; len(got) != 1 || got[0].(map[string]any)["id"] != two["id"] {
		t.Fatalf("the poll at edge-b returned %v, want edge-a's %v", got, two)
	}
	// An MQTT subscriber at edge-b gets what the device stored at edge-a over REST.
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(b.mustCLI("frontdoor", "ca")), 0o644)
	sub, _ := startSub(t, "-h", "127.0.0.1", "-p", portOf(b.mqttTLS), "--cafile", ca, "--insecure", "-u", "dev2", "-P", secret, "-V", "mqttv5", "-t", "devices/dev2/#", "-v", "-d")
	sub.waitText(t, "received SUBACK")
	postNotification(t, a, "dev2", secret, "three")
	sub.waitText(t, "devices/dev2/notifications/three")

	// One set of signing keys: a refresh token made at edge-a's folder works at edge-b,
	// and the access token edge-b gives for it works at edge-a.
	refresh := strings.TrimSpace(a.mustCLIStdout("device", "token", "dev2"))
	code, toks, _ := restCall(t, plainClient, "POST", "http://"+b.rest+"/api/rest/token/refresh", "", map[string]string{"refreshToken": refresh})
	if code != 201 || toks["accessToken"] == nil {
		t.Fatalf("edge-a's refresh token at edge-b: %d %v", code, toks)
	}
	if code, _, _ := restCall(t, plainClient, "GET", "http://"+a.rest+"/api/rest/device/dev2/notification", "Bearer "+toks["accessToken"].(string), nil); code != 200 {
		t.Fatalf("edge-b's access token at edge-a: %d", code)
	}
	app := deviceApp(t, "from dev1")
	ag := startProc(t, iotsafeBin, "agent", "--hub", a.addr+","+b.addr, "--key", key, "--hub-key", a.hostFP+","+b.hostFP,
		"--log-format", "json", "--log-level", "debug", "--expose", "http="+hostPortOf(app))
	ag.stderr.wait(t, "session up", "hub", a.addr)
	sock := a.socket("dev1", "http")
	mustGet(t, sock, "from dev1")
	if d := b.device("dev1"); d.Hub != "edge-a" {
		t.Fatalf("edge-b's view of dev1: at hub %q, want edge-a", d.Hub)
	}

	a.cmd.Process.Kill()
	a.cmd.Wait()
	ag.stderr.wait(t, "session up", "hub", b.addr)
	mustGet(t, sock, "from dev1")
	if d := b.device("dev1"); d.Hub != "edge-b" {
		t.Fatalf("after edge-a died dev1 is at hub %q, want edge-b", d.Hub)
	}

	a.mustCLI("device", "revoke", "dev1", "--reason", "stolen")
	b.log.wait(t, "closed sessions after a registry change made elsewhere", "device", "dev1")
}

var plainClient = &http.Client{Timeout: 90 * time.Second}

// deviceBearer logs device in with its telemetry secret at h's plain REST listener.
func deviceBearer(t *testing.T, h *hubProc, device, secret string) string {
	t.Helper()
	code, toks, _ := restCall(t, plainClient, "POST", "http://"+h.rest+"/api/rest/token", "", map[string]string{"login": device, "password": secret})
	if code != 201 || toks["accessToken"] == nil {
		t.Fatalf("login of %s at %s: %d %v", device, h.rest, code, toks)
	}
	return "Bearer " + toks["accessToken"].(string)
}

// postNotification stores a notification of device at h and returns what h answered.
func postNotification(t *testing.T, h *hubProc, device, secret, name string) map[string]any {
	t.Helper()
	code, got, _ := restCall(t, plainClient, "POST", "http://"+h.rest+"/api/rest/device/"+device+"/notification", deviceBearer(t, h, device, secret), map[string]any{"notification": name})
	if code != 201 || got["id"] == nil {
		t.Fatalf("storing %s of %s at %s: %d %v", name, device, h.rest, code, got)
	}
	return got
}

// listNotifications is device's notifications as h lists them.
func listNotifications(t *testing.T, h *hubProc, device, secret string) []map[string]any {
	t.Helper()
	code, _, list := restCall(t, plainClient, "GET", "http://"+h.rest+"/api/rest/device/"+device+"/notification", deviceBearer(t, h, device, secret), nil)
	if code != 200 {
		t.Fatalf("listing %s's notifications at %s: %d", device, h.rest, code)
	}
	var out []map[string]any
	for _, n := range list {
		out = append(out, n.(map[string]any))
	}
	return out
}

// runRefused runs a command expected to fail at start and returns its output; if it
// starts serving instead, it is stopped and the test fails (rather than hanging).
func runRefused(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var out strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "hub listening") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s started instead of being refused:\n%s", name, out.String())
		}
	}
	return out.String(), cmd.Wait()
}

// A device is reached through a hub that does not hold its session: two hubs in network
// namespaces of their own share one PostgreSQL registry, with shared listeners and
// peer addresses on a link between them. The device's agent is at edge-a; a client at
// edge-b connects to the device's protected socket address on edge-b's own loopback,
// and edge-b carries it to edge-a over their authenticated link. A hub that is not in
// the registry cannot log in as a peer.
func TestDeviceReachedThroughAnotherHub(t *testing.T) {
	nsA, nsB := netns(t), netns(t)
	n := poolCounter.Add(1) % 200
	ipA, ipB := fmt.Sprintf("10.88.%d.1", n), fmt.Sprintf("10.88.%d.2", n)
	vA, vB := fmt.Sprintf("ia%d-%d", os.Getpid()%10000, n), fmt.Sprintf("ib%d-%d", os.Getpid()%10000, n)
	for _, args := range [][]string{
		{"link", "add", vA, "netns", nsA, "type", "veth", "peer", "name", vB, "netns", nsB},
		{"-n", nsA, "addr", "add", ipA + "/30", "dev", vA}, {"-n", nsA, "link", "set", vA, "up"},
		{"-n", nsB, "addr", "add", ipB + "/30", "dev", vB}, {"-n", nsB, "link", "set", vB, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	dsn := pgscratch.Start(t).Database(t)
	hubIn := func(ns, name, ip string) *hubProc {
		data := t.TempDir()
		cfg := fmt.Sprintf("log: {level: debug, format: json}\naccess: {kernel: off}\npool: {cidr: 127.78.10.0/24, shared_listeners: true}\n"+
			"registry: {dsn: %q, hub_name: %s, peer_address: '%s:2222'}\nssh:\n  listen: '%s:2222'\n", dsn, name, ip, ip)
		if err := os.WriteFile(filepath.Join(data, "hub.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return startHubWith(t, data, "", func(h *hubProc) { h.wrap = []string{"ip", "netns", "exec", ns} })
	}
	a := hubIn(nsA, "edge-a", ipA)
	b := hubIn(nsB, "edge-b", ipB)
	key := a.addDevice("dev1")
	ln := listenInNetns(t, nsA, "127.0.0.1:0")
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "dev1 at edge-a") }))
	ag := startProc(t, "ip", "netns", "exec", nsA, iotsafeBin, "agent", "--hub", a.addr, "--key", key, "--hub-key", a.hostFP,
		"--log-format", "json", "--log-level", "debug", "--expose", "http="+ln.Addr().String())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("edge-a's log:\n%s", a.log.text())
		}
	})
	ag.stderr.wait(t, "session up")
	sock := a.socket("dev1", "http")
	b.log.wait(t, "pool ports held for the devices of other hubs", "ports", "1") // dev1's port, learnt from the change feed
	get := func(ns string) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", ns, needTool(t, "curl"), "-sS", "--fail", "--max-time", "20", "http://"+sock+"/").CombinedOutput()
		return string(out), err
	}
	if out, err := get(nsA); err != nil || out != "dev1 at edge-a" {
		t.Fatalf("at edge-a: %v %q", err, out)
	}
	if out, err := get(nsB); err != nil || out != "dev1 at edge-a" {
		t.Fatalf("through edge-b: %v %q\nedge-b's log:\n%s", err, out, b.log.text())
	}
	b.log.wait(t, "connection relayed to a peer hub", "device", "dev1", "peer_hub", "edge-a")
	a.log.wait(t, "peer hub connected", "peer_hub", "edge-b")

	// Not a hub of the registry: a key edge-a does not know, under a hub's user name.
	stranger := filepath.Join(t.TempDir(), "stranger")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	out, err := exec.Command("ip", "netns", "exec", nsB, "ssh", "-N", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-i", stranger, "-p", "2222", "hub:edge-b@"+ipA).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("a stranger as peer hub edge-b: %v\n%s", err, out)
	}
	a.log.wait(t, "peer hub refused", "hub", "edge-b")
}

// lan makes network namespaces of their own for n machines on one Ethernet segment (a
// bridge in a namespace of its own): it returns each namespace and its address.
func lan(t *testing.T, n int) (nss, ips []string) {
	t.Helper()
	sw := netns(t)
	net := poolCounter.Add(1)%200 + 20
	tag := fmt.Sprintf("%d%d", os.Getpid()%1000, net)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	run("-n", sw, "link", "add", "br0", "type", "bridge")
	run("-n", sw, "link", "set", "br0", "up")
	for i := range n {
		ns, ip := netns(t), fmt.Sprintf("10.89.%d.%d", net, i+1)
		in, out := fmt.Sprintf("m%s-%d", tag, i), fmt.Sprintf("s%s-%d", tag, i)
		run("link", "add", in, "netns", ns, "type", "veth", "peer", "name", out, "netns", sw)
		run("-n", sw, "link", "set", out, "master", "br0")
		run("-n", sw, "link", "set", out, "up")
		run("-n", ns, "addr", "add", ip+"/24", "dev", in)
		run("-n", ns, "link", "set", in, "up")
		nss, ips = append(nss, ns), append(ips, ip)
	}
	return nss, ips
}

// The three hubs on one PostgreSQL registry, each in a network namespace of its
// own, the device's agent in a fourth with all three hubs in its list: the device,
// served at edge-a, is reached through edge-b's front door (an account's grant) and
// through edge-c's resolver (iotsafe connect); PostgreSQL restarts and it all goes on;
// a revocation written at edge-c closes a session at edge-a at once; edge-a is killed,
// the device moves on and is reachable from edge-c again, on the same address.
func TestThreeHubsOnePostgres(t *testing.T) {
	nss, ips := lan(t, 4)
	devNS := nss[3]
	pg := pgscratch.Start(t)
	dsn := pg.Database(t)
	names := []string{"edge-a", "edge-b", "edge-c"}
	hubs := make([]*hubProc, 3)
	for i, name := range names {
		data := t.TempDir()
		cfg := fmt.Sprintf("log: {level: debug, format: json}\naccess: {kernel: off}\npool: {cidr: 127.78.11.0/24, shared_listeners: true}\n"+
			"registry: {dsn: %q, hub_name: %s, peer_address: '%s:2222'}\nssh:\n  listen: '%s:2222'\n", dsn, name, ips[i], ips[i])
		if name == "edge-b" {
			cfg += "frontdoor: {listen: '127.0.0.1:0', domain: " + fdDomain + "}\n"
		}
		if err := os.WriteFile(filepath.Join(data, "hub.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		ns := nss[i]
		hubs[i] = startHubWith(t, data, "", func(h *hubProc) { h.wrap = []string{"ip", "netns", "exec", ns} })
	}
	a, b, c := hubs[0], hubs[1], hubs[2]
	t.Cleanup(func() {
		if t.Failed() {
			for i, h := range hubs {
				t.Logf("%s's log:\n%s", names[i], h.log.text())
			}
		}
	})
	var hubAddrs, hubKeys []string
	for _, h := range hubs {
		hubAddrs, hubKeys = append(hubAddrs, h.addr), append(hubKeys, h.hostFP)
	}
	agentFor := func(device, body string) *proc {
		key := a.addDevice(device)
		ln := listenInNetns(t, devNS, "127.0.0.1:0")
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
		ag := startProc(t, "ip", "netns", "exec", devNS, iotsafeBin, "agent", "--hub", strings.Join(hubAddrs, ","), "--key", key,
			"--hub-key", strings.Join(hubKeys, ","), "--log-format", "json", "--log-level", "debug", "--expose", "http="+ln.Addr().String())
		ag.stderr.wait(t, "session up", "hub", a.addr)
		return ag
	}
	ag1 := agentFor("dev1", "dev1 here")
	sock := a.socket("dev1", "http")
	c.log.wait(t, "pool ports held for the devices of other hubs", "ports", "1")

	// Through edge-b's front door, as alice with a grant.
	b.addAccount("alice", "alice-password-1")
	b.mustCLI("grant", "--account", "alice", "dev1", "http")
	caFile := filepath.Join(b.data, "ca.crt")
	os.WriteFile(caFile, []byte(b.mustCLI("frontdoor", "ca")), 0o644)
	host := "dev1." + fdDomain
	front := func() (string, error) {
		out, err := exec.Command("ip", "netns", "exec", nss[1], "curl", "-sS", "--fail", "--max-time", "20", "--cacert", caFile,
			"--resolve", host+":"+portOf(b.front)+":127.0.0.1", "-u", "alice:alice-password-1", "https://"+host+":"+portOf(b.front)+"/").CombinedOutput()
		return string(out), err
	}
	// Through edge-c's resolver: iotsafe connect, as root (the hub's own user).
	connect := func() (string, error) {
		cmd := exec.Command("ip", "netns", "exec", nss[2], iotsafeBin, "connect", "dev1", "http", "--data", c.data)
		cmd.Stdin = strings.NewReader("GET / HTTP/1.0\r\n\r\n")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := front(); err != nil || out != "dev1 here" {
		t.Fatalf("edge-b's front door: %v %q", err, out)
	}
	if out, err := connect(); err != nil || !strings.HasSuffix(out, "dev1 here") {
		t.Fatalf("edge-c's resolver: %v %q", err, out)
	}

	// PostgreSQL restarts: the session serves on, and the hubs use the registry again.
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := connect(); err != nil || !strings.HasSuffix(out, "dev1 here") {
		t.Fatalf("edge-c's resolver after PostgreSQL restarted: %v %q", err, out)
	}

	// A revocation written at edge-c closes dev2's session at edge-a at once.
	agentFor("dev2", "dev2 here")
	c.mustCLI("device", "revoke", "dev2", "--reason", "stolen")
	a.log.wait(t, "closed sessions after a registry change made elsewhere", "device", "dev2")

	// edge-a dies: dev1 moves on (edge-b, the next in its agent's list) and edge-c
	// reaches it there, on the same address.
	a.cmd.Process.Kill()
	a.cmd.Wait()
	ag1.stderr.wait(t, "session up", "hub", b.addr)
	if got := b.socket("dev1", "http"); got != sock {
		t.Fatalf("dev1's socket moved: %s -> %s", sock, got)
	}
	if out, err := connect(); err != nil || !strings.HasSuffix(out, "dev1 here") {
		t.Fatalf("edge-c's resolver after edge-a died: %v %q", err, out)
	}
	if out, err := front(); err != nil || out != "dev1 here" {
		t.Fatalf("edge-b's front door after edge-a died: %v %q", err, out)
	}
}
