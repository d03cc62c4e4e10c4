package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

type hostKeyProgressJSON struct {
	Kind        string `json:"kind"`
	State       string `json:"state"`
	Fingerprint string `json:"fingerprint"`
	Devices     int    `json:"devices"`
	Learned     int    `json:"learned"`
	Told        int    `json:"told"`
	Pending     []struct {
		Device string `json:"device"`
		State  string `json:"state"`
	} `json:"pending"`
}

func (h *hubProc) hostKeys() []hostKeyProgressJSON {
	h.t.Helper()
	var out []hostKeyProgressJSON
	if err := json.Unmarshal([]byte(h.mustCLI("hostkey", "list", "--pending", "-o", "json")), &out); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// A host key rotation with the stock OpenSSH client and the iotsafe agent: both learn
// the next key over their live sessions (hostkeys-00/hostkeys-prove-00), promote refuses
// while a device has not (Dropbear's dbclient, announced to and unharmed; a device that
// never connected), and after the promotion both connect with the new key and drop the
// retired one from their known_hosts. A client that knows only the old key is refused,
// which is why promote checks first.
func TestHostKeyRotation(t *testing.T) {
	needTool(t, "ssh")
	h := startHub(t, "", "metrics: {listen: '127.0.0.1:0'}\n")
	k1, k2, k3 := h.addDevice("dev1"), h.addDevice("dev2"), h.addDevice("dev3")
	h.addDevice("dev4") // never connects
	oldFP, oldPK := h.hostFP, h.hostPK

	// dev1: stock OpenSSH; the alias keeps its known_hosts entry across the hub's port.
	kh1 := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh1, []byte("iotsafe-hub "+oldPK+"\n"), 0o600)
	sshArgv := func() []string {
		return []string{"-N", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + kh1,
			"-o", "HostKeyAlias=iotsafe-hub", "-o", "UpdateHostKeys=yes", "-o", "LogLevel=VERBOSE", "-o", "ServerAliveInterval=5",
			"-i", k1, "-p", h.port, "dev1@127.0.0.1"}
	}
	ssh1 := startProc(t, "ssh", sshArgv()...)
	h.log.wait(t, "session open", "device", "dev1")
	// dev2: the agent with a known_hosts file.
	kh2 := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh2, []byte(fmt.Sprintf("[127.0.0.1]:%s %s\n", h.port, oldPK)), 0o600)
	agent := startProc(t, iotsafeBin, "agent", "--hub", h.addr, "--key", k2, "--known-hosts", kh2, "--log-format", "json", "--expose", "http=127.0.0.1:9")
	agent.stderr.wait(t, "session up")

	// dev3: Dropbear's dbclient, which takes no announcements and must not mind them.
	dbKey := k3 + ".dropbear"
	if out, err := exec.Command(needTool(t, "dropbearconvert"), "openssh", "dropbear", k3, dbKey).CombinedOutput(); err != nil {
		t.Fatalf("dropbearconvert: %v\n%s", err, out)
	}
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte("127.0.0.1 "+oldPK+"\n"), 0o600)
	startProcEnv(t, []string{"HOME=" + home}, "dbclient", "-N", "-i", dbKey, "-p", h.port, "-R", "http:80:"+hostPortOf(deviceApp(t, "dropbear")), "dev3@127.0.0.1")
	h.log.wait(t, "reverse forward open", "device", "dev3")

	out := h.mustCLI("hostkey", "add")
	f := strings.Fields(out[strings.Index(out, "next host key "):])
	if len(f) < 5 || !strings.HasPrefix(f[4], "SHA256:") || !strings.Contains(out, "the running hub took it") {
		t.Fatalf("hostkey add:\n%s", out)
	}
	nextFP := f[4]
	// Both live sessions learn it without reconnecting.
	ssh1.stderr.waitText(t, "Learned new hostkey: ED25519 "+nextFP)
	agent.stderr.wait(t, "learned the hub's next host key", "key", nextFP)
	h.log.wait(t, "device learns the hub's next host key", "device", "dev1")
	h.log.wait(t, "device learns the hub's next host key", "device", "dev2")
	h.log.wait(t, "host keys announced", "device", "dev3")
	mustGet(t, h.socket("dev3", "http"), "dropbear") // its session lives on
	if b, _ := os.ReadFile(kh2); !strings.Contains(string(b), "[127.0.0.1]:"+h.port+" ssh-ed25519 ") || strings.Count(string(b), "\n") != 2 {
		t.Fatalf("the agent's known_hosts after the rotation began:\n%s", b)
	}
	keys := h.hostKeys()
	if len(keys) != 2 || keys[1].State != "next" || keys[1].Fingerprint != nextFP || keys[1].Learned != 2 || keys[1].Devices != 4 ||
		len(keys[1].Pending) != 2 || keys[1].Pending[0].Device != "dev3" || keys[1].Pending[0].State != "announced" ||
		keys[1].Pending[1].Device != "dev4" || keys[1].Pending[1].State != "not reached" {
		t.Fatalf("hostkey list during the rotation: %+v", keys)
	}

	resp, err := http.Get("http://" + h.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := grepLines(string(body), "iotsafe_hostkey_"); !strings.Contains(m, "iotsafe_hostkey_announcements_total 3") || !strings.Contains(m, `iotsafe_hostkey_proofs_total{result="answered"} 2`) {
		t.Fatalf("the rotation's metrics: %q", m)
	}
	if out := h.mustCLI("device", "show", "dev3"); !strings.Contains(out, "hub host key  next "+nextFP+": announced ") {
		t.Fatalf("device show of the Dropbear device during the rotation:\n%s", out)
	}
	if out := h.mustCLI("device", "show", "dev1"); !strings.Contains(out, "hub host key  next "+nextFP+": proven ") {
		t.Fatalf("device show of the OpenSSH device during the rotation:\n%s", out)
	}
	if out, _ := h.cli("status"); !strings.Contains(out, "host key   ed25519 "+nextFP+" next, announced since") {
		t.Fatalf("status during the rotation:\n%s", out)
	}
	if out, err := h.cli("hostkey", "promote"); err == nil || !strings.Contains(out, "stop it first") {
		t.Fatalf("promote with the hub running: %v\n%s", err, out)
	}
	// OpenSSH writes known_hosts right after it logs what it learned: let it finish.
	ssh1.cmd.Process.Signal(syscall.SIGTERM)
	ssh1.waitExit(t)
	h.stopKeepingPort()
	if out, err := h.cli("hostkey", "promote"); err == nil || !strings.Contains(out, "learned by 2 of 4 devices") {
		t.Fatalf("promote while dev3 has not learned the key: %v\n%s", err, out)
	}
	out = h.mustCLI("hostkey", "promote", "--force")
	if !strings.Contains(out, "retired  ssh-ed25519 "+oldFP) {
		t.Fatalf("promote:\n%s", out)
	}
	if ev := h.events("", "hostkey_rotation"); len(ev) != 2 || !strings.Contains(ev[1].Detail+ev[0].Detail, "forced: ed25519 key "+nextFP+": learned by 2 of 4") {
		t.Fatalf("the audit log of the rotation: %+v", ev)
	}
	h.start()
	if h.hostFP != nextFP {
		t.Fatalf("the hub signs with %s after the promotion, want %s", h.hostFP, nextFP)
	}

	// The stock client connects with the key it learned, then drops the retired one.
	ssh2 := startProc(t, "ssh", sshArgv()...)
	ssh2.stderr.waitText(t, "Deprecating obsolete hostkey: ED25519 "+oldFP)
	h.log.wait(t, "session open", "device", "dev1")
	ssh2.cmd.Process.Signal(syscall.SIGTERM)
	ssh2.waitExit(t)
	if b, _ := os.ReadFile(kh1); strings.Contains(string(b), oldPK[strings.Index(oldPK, " ")+1:]) || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("dev1's known_hosts after the promotion:\n%s", b)
	}
	// The agent reconnects by itself, trusting the new key, and drops the old one too.
	agent.stderr.wait(t, "dropped a host key the hub retired", "key", oldFP)
	agent.stderr.waitN(t, 2, "session up")
	h.log.wait(t, "host keys announced", "device", "dev1")
	h.log.wait(t, "host keys announced", "device", "dev2")
	// A client that knows only the retired key is refused: the lock-out promote guards.
	stale := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(stale, []byte("iotsafe-hub "+oldPK+"\n"), 0o600)
	cmd := exec.Command("ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile="+stale,
		"-o", "HostKeyAlias=iotsafe-hub", "-i", k1, "-p", h.port, "dev1@127.0.0.1", "true")
	if msg, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(msg), "REMOTE HOST IDENTIFICATION HAS CHANGED") {
		t.Fatalf("a client pinned to the retired key: %v\n%s", err, msg)
	}
	keys = h.hostKeys()
	if len(keys) != 2 || keys[0].Fingerprint != nextFP || keys[1].State != "retired" || keys[1].Fingerprint != oldFP || keys[1].Told != 2 {
		t.Fatalf("hostkey list after the promotion: %+v", keys)
	}
}

// A gateway pins its centre by fingerprint (upstream.hub_key): when the centre adds a
// next key, the gateway says which fingerprint to pin; once both are pinned it has the
// centre prove the next key, and the centre counts the gateway as ready for promotion.
func TestGatewayLearnsTheCentresNextHostKeyByItsPin(t *testing.T) {
	p := startGatewayPair(t)
	out := p.centre.mustCLI("hostkey", "add")
	nextFP := strings.Fields(out[strings.Index(out, "next host key "):])[4]
	p.gw.log.wait(t, "the hub announces a host key that is not pinned: pin it beside the current one (agent --hub-key, gateway upstream.hub_key) before the hub's operator promotes it, or the hub will be refused", "key", nextFP)
	if k := p.centre.hostKeys(); k[1].Learned != 0 || len(k[1].Pending) != 1 || k[1].Pending[0].State != "announced" {
		t.Fatalf("before the gateway pins the next key: %+v", k)
	}
	// The operator pins both in the gateway's hub.yaml and restarts it.
	b, err := os.ReadFile(p.gw.config)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p.gw.config, []byte(strings.Replace(string(b), "hub_key: "+p.centre.hostFP, "hub_key: "+p.centre.hostFP+","+nextFP, 1)), 0o600)
	p.gw.stop()
	p.gw.start()
	p.centre.log.wait(t, "device learns the hub's next host key", "device", "gw1")
	if k := p.centre.hostKeys(); k[1].Learned != 1 || k[1].Devices != 1 {
		t.Fatalf("after the gateway pinned the next key: %+v", k)
	}
}

// A hub with keys of two types shows the one the client's order picks. An agent pinned
// to either gets in: when the hub shows a type the pin refuses, the agent connects again
// without that type (a hub that adds a type, or rotates to another, keeps its fleet).
func TestAgentFindsThePinnedKeyTypeAmongTheHubs(t *testing.T) {
	h := startHub(t, "", "  host_key_algorithms: [ssh-ed25519, rsa-sha2-512, rsa-sha2-256]\n")
	b, err := os.ReadFile(filepath.Join(h.data, "ready.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		HostKeys []struct{ Type, Fingerprint string } `json:"host_keys"`
	}
	if err := json.Unmarshal(b, &ready); err != nil || len(ready.HostKeys) != 2 || ready.HostKeys[1].Type != "ssh-rsa" {
		t.Fatalf("the hub's keys: %+v %v", ready.HostKeys, err)
	}
	for i, name := range []string{"dev1", "dev2"} {
		key := h.addDevice(name)
		a := startProc(t, iotsafeBin, "agent", "--hub", h.addr, "--key", key, "--hub-key", ready.HostKeys[i].Fingerprint,
			"--log-format", "json", "--expose", "http=127.0.0.1:9")
		a.stderr.wait(t, "session up")
		if got := h.device(name).LastAlgos; got == nil {
			t.Fatalf("%s: no algorithms recorded", name)
		}
	}
	if out := h.mustCLI("device", "show", "dev2", "-o", "json"); !strings.Contains(out, "rsa-sha2-") {
		t.Fatalf("dev2, pinned to the RSA key, must use it:\n%s", out)
	}
}

// Rotations one after another reach a live agent: it is told each new set of keys on
// the session it has (an OpenSSH client only once per connection), so a next key added
// after a dropped one is learned without a reconnection.
func TestAgentLearnsEachNextKeyOnOneSession(t *testing.T) {
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	kh := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh, []byte(fmt.Sprintf("[127.0.0.1]:%s %s\n", h.port, h.hostPK)), 0o600)
	agent := startProc(t, iotsafeBin, "agent", "--hub", h.addr, "--key", key, "--known-hosts", kh, "--log-format", "json", "--expose", "http=127.0.0.1:9")
	agent.stderr.wait(t, "session up")
	var fps []string
	for i := range 2 {
		out := h.mustCLI("hostkey", "add")
		fp := strings.Fields(out[strings.Index(out, "next host key "):])[4]
		agent.stderr.wait(t, "learned the hub's next host key", "key", fp)
		h.log.waitN(t, i+1, "device learns the hub's next host key", "device", "dev1")
		fps = append(fps, fp)
		if i == 0 {
			h.mustCLI("hostkey", "drop")
		}
	}
	if n := agent.stderr.count("session up"); n != 1 {
		t.Fatalf("the agent connected %d times, want once", n)
	}
	if k := h.hostKeys(); k[1].Fingerprint != fps[1] || k[1].Learned != 1 {
		t.Fatalf("hostkey list: %+v", k)
	}
}
