package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// deviceTarget is a device architecture the agent is built for, and the qemu user-mode
// emulator that runs its binary here.
type deviceTarget struct {
	name    string   // as 'make agents' names it
	env     []string // GOARCH and its variant
	machine elf.Machine
	order   string // byte order the ELF header must declare
	qemu    string
}

// The two device architectures most unlike this machine: 32-bit ARM (64-bit atomics need
// alignment there) and big-endian MIPS without an FPU (a byte-order assumption would
// break there), as on many routers.
var deviceTargets = []deviceTarget{
	{"armv7", []string{"GOARCH=arm", "GOARM=7"}, elf.EM_ARM, "LittleEndian", "qemu-arm"},
	{"mips", []string{"GOARCH=mips", "GOMIPS=softfloat"}, elf.EM_MIPS, "BigEndian", "qemu-mips"},
}

// buildAgent builds cmd/iotsafe-agent for t as 'make agents' does (scripts/build-agents.sh:
// static, stripped) and returns the binary's path.
func buildAgent(tb testing.TB, dir string, d deviceTarget) string {
	bin := filepath.Join(dir, "iotsafe-agent-linux-"+d.name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../../cmd/iotsafe-agent")
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux"), d.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Errorf("building the agent for %s: %v\n%s", d.name, err, out)
		return ""
	}
	return bin
}

// The agent built for a device's architecture works there: each binary is an ELF file
// of that machine, and run under qemu's user-mode emulation it holds a session with a
// real hub, serves the device's HTTP service through a reverse forward, reaches a hub
// service through a direct forward from the device's pool address, and stops cleanly.
func TestAgentBinaryOnDeviceArchitectures(t *testing.T) {
	for _, d := range deviceTargets {
		needTool(t, d.qemu)
	}
	dir := t.TempDir()
	bins := make([]string, len(deviceTargets))
	var wg sync.WaitGroup
	for i, d := range deviceTargets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bins[i] = buildAgent(t, dir, d)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	h := startHub(t, "", "")
	target := echoSource(t)
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\nreverse: {http: 0}\ndirect: {broker: %q}\n", target))
	for i, d := range deviceTargets {
		t.Run(d.name, func(t *testing.T) {
			f, err := elf.Open(bins[i])
			if err != nil {
				t.Fatal(err)
			}
			machine, order := f.Machine, f.ByteOrder.String()
			f.Close()
			if machine != d.machine || order != d.order {
				t.Fatalf("the binary is for %v (%s), want %v (%s)", machine, order, d.machine, d.order)
			}
			fi, _ := os.Stat(bins[i])
			t.Logf("iotsafe-agent-linux-%s: %.1f MB", d.name, float64(fi.Size())/1e6)

			dev := "dev-" + d.name
			key := h.addDevice(dev, "--profile", prof)
			app := deviceApp(t, "reading from "+d.name)
			local := freePort(t)
			a := startProc(t, d.qemu, bins[i], "--hub", h.addr, "--key", key, "--hub-key", h.hostFP,
				"--expose", "http="+hostPortOf(app), "--forward", local+"=broker", "--log-format", "json")
			a.stderr.wait(t, "session up")
			mustGet(t, h.socket(dev, "http"), "reading from "+d.name)
			if got, want := readLine(t, local), h.device(dev).Address; got != want {
				t.Fatalf("the direct forward reached its target from %s, want the device's address %s", got, want)
			}
			a.cmd.Process.Signal(syscall.SIGTERM)
			if code := a.waitExit(t); code != 0 {
				t.Fatalf("the agent exited with %d at SIGTERM, want 0:\n%s", code, a.stderr.text())
			}
			h.log.wait(t, "session closed", "device", dev)
		})
	}
}

// iotsafe-agent is the agent's command alone, built on its own or as the full binary
// called by that name (the link 'make install' makes, which the agent's unit runs): its
// version, its errors, and no other command.
func TestAgentBinaryCommandLine(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "iotsafe-agent")
	if err := os.Symlink(iotsafeBin, link); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{buildAgent(t, dir, deviceTarget{name: "native"}), link} {
		if bin == "" {
			continue
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "iotsafe-agent version ") {
			t.Fatalf("%s --version: %v %s", bin, err, out)
		}
		out, err = exec.Command(bin, "--hub", "127.0.0.1:1").CombinedOutput()
		if err == nil || string(out) != "iotsafe-agent: --key FILE is required\n" {
			t.Fatalf("%s without --key: %v %q", bin, err, out)
		}
		if out, err := exec.Command(bin, "hub").CombinedOutput(); err == nil || !strings.Contains(string(out), `unknown command "hub"`) {
			t.Fatalf("%s ran a hub: %v %s", bin, err, out)
		}
	}
}

// The OpenWrt init script (dist/openwrt/iotsafe-agent) registers with procd a command
// the agent accepts, restarted after any exit with no limit on retries. procd and its
// ubus cannot run here: the script is read by busybox's ash (OpenWrt's shell) with
// stand-ins for procd.sh's functions that write down what the script asks for.
func TestOpenWrtInitScript(t *testing.T) {
	ash := needTool(t, "busybox")
	h := startHub(t, "", "")
	key := h.addDevice("router1")
	conf := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(conf, []byte(fmt.Sprintf("hub: %s\nkey: %s\nhub_key: %s\nexpose: [\"http=127.0.0.1:80\"]\n", h.addr, key, h.hostFP)), 0o600)
	standIns := `
procd_open_instance() { echo open; }
procd_set_param() { printf '%s' "$1"; shift; for a in "$@"; do printf ' [%s]' "$a"; done; echo; }
procd_close_instance() { echo close; }
. ../../dist/openwrt/iotsafe-agent
[ "$USE_PROCD" = 1 ] && [ "$PROG" = /usr/bin/iotsafe-agent ] && [ "$CONF" = /etc/iotsafe/agent.yaml ] || { echo "unexpected settings: $USE_PROCD $PROG $CONF"; exit 1; }
PROG=$1 CONF=$2
start_service`
	link := filepath.Join(t.TempDir(), "iotsafe-agent")
	os.Symlink(iotsafeBin, link)
	out, err := exec.Command(ash, "ash", "-eu", "-c", standIns, "ash", link, conf).CombinedOutput()
	if err != nil {
		t.Fatalf("ash: %v\n%s", err, out)
	}
	want := fmt.Sprintf("open\ncommand [%s] [--agent-config] [%s]\nrespawn [3600] [10] [0]\nfile [%s]\nstdout [1]\nstderr [1]\nclose\n", link, conf, conf)
	if string(out) != want {
		t.Fatalf("the script asked procd for\n%s\nwant\n%s", out, want)
	}
	if out, err := exec.Command(link, "--agent-config", conf, "--check-config").CombinedOutput(); err != nil || !strings.Contains(string(out), "agent configuration ok") {
		t.Fatalf("the agent refused the command line the script gives procd: %v\n%s", err, out)
	}
}

// 'iotsafe device agent-config' prints an agent.yaml the agent takes as it is: the
// hub's keys pinned, the forwards checked against the device's profile. Made during a
// host key rotation it pins the next key too, so the device learns it at once and
// connects after the promotion with nothing changed on the device.
func TestDeviceAgentConfig(t *testing.T) {
	h := startHub(t, "", "")
	target := echoSource(t)
	prof := writeProfile(t, t.TempDir(), fmt.Sprintf("name: sensor\nreverse: {http: 0, cam: 0}\ndirect: {broker: %q}\n", target))
	key := h.addDevice("dev1", "--profile", prof)
	app := deviceApp(t, "made by agent-config")
	local := freePort(t)

	// Refusals say what is wrong, and print nothing.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dev1"}, "--hub HOST:PORT is required"},
		{[]string{"dev1", "--hub", h.addr + ",hub2"}, "--hub hub2: want HOST:PORT"},
		{[]string{"dev1", "--hub", h.addr, "--expose", "ftp=127.0.0.1:21"}, "profile sensor has no reverse alias ftp (it has cam, http)"},
		{[]string{"dev1", "--hub", h.addr, "--forward", local + "=db"}, "profile sensor has no direct alias db (it has broker)"},
		{[]string{"dev1", "--hub", h.addr, "--expose", "http"}, "want ALIAS=HOST:PORT"},
		{[]string{"nobody", "--hub", h.addr}, `device "nobody"`},
	} {
		stdout, err := h.cliCommand(append(append([]string{"device", "agent-config"}, c.args...), "--data", h.data)...).Output()
		if err == nil || len(stdout) > 0 {
			t.Fatalf("agent-config %v: %v, printed %q", c.args, err, stdout)
		}
		if ee, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(ee.Stderr), c.want) {
			t.Fatalf("agent-config %v: %v, want %q", c.args, err, c.want)
		}
	}

	out := h.mustCLI("hostkey", "add")
	nextFP := strings.Fields(out[strings.Index(out, "next host key "):])[4]
	conf := h.mustCLIStdout("device", "agent-config", "dev1", "--hub", h.addr, "--key-path", key,
		"--expose", "http="+hostPortOf(app), "--forward", local+"=broker")
	if !strings.Contains(conf, "hub_key: "+h.hostFP+","+nextFP+"\n") || !strings.Contains(conf, "#  - cam=127.0.0.1:PORT\n") {
		t.Fatalf("agent-config during a rotation:\n%s", conf)
	}
	confPath := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(confPath, []byte(conf), 0o600)
	a := startProc(t, iotsafeBin, "agent", "--agent-config", confPath, "--log-format", "json")
	a.stderr.wait(t, "session up")
	mustGet(t, h.socket("dev1", "http"), "made by agent-config")
	if got, want := readLine(t, local), h.device("dev1").Address; got != want {
		t.Fatalf("the direct forward reached its target from %s, want %s", got, want)
	}
	h.log.wait(t, "device learns the hub's next host key", "device", "dev1")

	h.stop()
	h.mustCLI("hostkey", "promote") // every device learned the next key: no --force
	// The hub comes back where the device's agent.yaml says it is.
	b, _ := os.ReadFile(h.config)
	os.WriteFile(h.config, []byte(strings.Replace(string(b), "listen: 127.0.0.1:0", "listen: "+h.addr, 1)), 0o600)
	h.start()
	a.stderr.waitN(t, 2, "session up")
	mustGet(t, h.socket("dev1", "http"), "made by agent-config")
}
