package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// systemdManager is a real systemd service manager (systemd --user, run as root) in a
// private mount namespace and cgroups of its own: the shipped units run under it with
// their sandboxing as on a device or a hub host.
type systemdManager struct {
	t   *testing.T
	pid int
	// Its folders are on a tmpfs over /run in its namespace, as on a booted system (a
	// unit's sandbox gets a /run of its own when /run is not a mount point) and out of
	// /tmp (which PrivateTmp hides); the test reaches them through path.
	base    string
	runtime string // XDG_RUNTIME_DIR: the manager's sockets
	config  string // XDG_CONFIG_HOME: units, and %E in them
	// enter runs a command in the manager's mount namespace.
	enter []string
}

// startSystemd starts the manager with the units of dist/systemd installed, each with a
// drop-in that puts it in network namespace ns and its output in base/UNIT.log (this
// manager has no journal), plus the unit's extra settings.
func startSystemd(t *testing.T, ns string, extra map[string]string) *systemdManager {
	t.Helper()
	needRoot(t)
	const manager = "/lib/systemd/systemd"
	if _, err := os.Stat(manager); err != nil {
		t.Fatalf("%s: %v: run 'make test' (scripts/setup.sh installs systemd)", manager, err)
	}
	for _, tool := range []string{"systemctl", "systemd-analyze", "unshare", "nsenter", "mount"} {
		needTool(t, tool)
	}
	m := &systemdManager{t: t, base: "/run/iotsafe-e2e"}
	m.runtime, m.config = m.base+"/runtime", m.base+"/config"
	procs := ownCgroups(t)
	// The manager's mount namespace: a /run of its own, with the host's network
	// namespaces; /run/systemd/system tells the manager that systemd runs (the host's
	// must not say so); /usr/local/bin holds this build as the units'
	// /usr/local/bin/iotsafe, and the link to it that 'make install' makes as
	// iotsafe-agent, so they run unchanged. /mnt is where the new /run is made.
	// mount -n: nothing goes into the host's userspace mount table (/run/mount).
	script := `set -e
for f in $CGROUP_PROCS; do echo $$ > "$f"; done
mount -n -t tmpfs -o mode=0755 iotsafe-e2e /mnt
mkdir /mnt/netns
mount -n --rbind /run/netns /mnt/netns
mount -n --move /mnt /run
mkdir -p /run/systemd/system "$XDG_CONFIG_HOME/systemd/user"
mkdir -m 0700 "$XDG_RUNTIME_DIR"
mount -n -t tmpfs -o mode=0755 iotsafe-e2e /usr/local/bin
cp "$IOTSAFE_BIN" /usr/local/bin/iotsafe
ln -s iotsafe /usr/local/bin/iotsafe-agent
exec "$MANAGER" --user`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	// XDG_STATE_HOME: %S of systemd 253 on; 252 puts %S in XDG_CONFIG_HOME too.
	cmd.Env = append(os.Environ(), "CGROUP_PROCS="+strings.Join(procs, " "), "IOTSAFE_BIN="+iotsafeBin, "MANAGER="+manager,
		"XDG_RUNTIME_DIR="+m.runtime, "XDG_CONFIG_HOME="+m.config, "XDG_STATE_HOME="+m.base+"/state")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	m.pid = cmd.Process.Pid
	m.enter = []string{"nsenter", "-t", strconv.Itoa(m.pid), "-m", "--", "env", "XDG_RUNTIME_DIR=" + m.runtime}
	t.Cleanup(func() {
		// SIGTERM: the manager stops every unit, then exits.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	poll(t, "the systemd manager's control socket", func() bool {
		select {
		case <-exited:
			t.Fatalf("systemd --user exited: %v", cmd.ProcessState)
		default:
		}
		_, err := os.Stat(m.path(m.runtime + "/systemd/private"))
		return err == nil
	})
	// What the system's manager makes at boot, and a unit's sandbox mounts over what it
	// hides (ProtectHome, ProtectKernelTunables, ProtectKernelLogs): this manager made
	// them in its runtime folder.
	if out, err := m.run("sh", "-c", `mkdir /run/systemd/inaccessible && mount -n --bind "$XDG_RUNTIME_DIR/systemd/inaccessible" /run/systemd/inaccessible`); err != nil {
		t.Fatalf("inaccessible nodes: %v %s", err, out)
	}
	units := m.path(m.config + "/systemd/user")
	for _, unit := range []string{"iotsafe-hub", "iotsafe-agent"} {
		b, err := os.ReadFile(filepath.Join("../../dist/systemd", unit+".service"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(units, unit+".service"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		dropIn := fmt.Sprintf("[Service]\nNetworkNamespacePath=/run/netns/%s\nStandardOutput=append:%s\nStandardError=append:%s\n%s",
			ns, m.logFile(unit), m.logFile(unit), extra[unit])
		os.MkdirAll(filepath.Join(units, unit+".service.d"), 0o755)
		if err := os.WriteFile(filepath.Join(units, unit+".service.d", "e2e.conf"), []byte(dropIn), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.ctl("stop", unit) })
	}
	if out, err := m.ctl("daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v %s", err, out)
	}
	// The real systemd's own check of the shipped units, as installed.
	installed := m.config + "/systemd/user/"
	out, err := m.run("systemd-analyze", "--user", "verify", installed+"iotsafe-hub.service", installed+"iotsafe-agent.service")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	return m
}

// ownCgroups makes a cgroup for the manager below the test's own in every hierarchy and
// returns their cgroup.procs files; they are removed at the end. A service manager
// started in the cgroup of other processes moves them all into an init.scope of its
// own: the test's, and the host's if the test runs in the root cgroup.
func ownCgroups(t *testing.T) []string {
	t.Helper()
	name := fmt.Sprintf("iotsafe-e2e-systemd-%d-%d", os.Getpid(), poolCounter.Add(1))
	mounts := cgroupMounts(t)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var procs, dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[1] == "cpuset" {
			continue // cpuset takes no process before its cpus and mems are set; the manager does not use it
		}
		mnt, ok := mounts[f[1]]
		if !ok {
			continue
		}
		dir := filepath.Join(mnt, f[2], name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("cgroup for the manager: %v", err)
		}
		dirs = append(dirs, dir)
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			removeCgroupTree(t, d)
		}
	})
	return procs
}

// cgroupMounts maps a /proc/self/cgroup controller list ("memory", "name=systemd", ""
// for the unified hierarchy) to where that hierarchy is mounted.
func cgroupMounts(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || fields[3] != "/" {
			continue // only hierarchies mounted from their root
		}
		switch fields[sep+1] {
		case "cgroup2":
			out[""] = fields[4]
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(fields[sep+3], ",") {
				if !cgroupMountOption[o] && !strings.HasPrefix(o, "release_agent=") {
					ctrls = append(ctrls, o)
				}
			}
			out[strings.Join(ctrls, ",")] = fields[4]
		}
	}
	return out
}

// cgroupMountOption are a v1 cgroup mount's options that name no controller.
var cgroupMountOption = map[string]bool{"rw": true, "ro": true, "relatime": true, "noatime": true, "nosuid": true, "nodev": true,
	"noexec": true, "xattr": true, "clone_children": true, "noprefix": true, "cpuset_v2_mode": true}

// removeCgroupTree removes dir and the cgroups the manager made below it, killing what
// still runs there.
func removeCgroupTree(t *testing.T, dir string) {
	var subs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			subs = append(subs, p)
		}
		return nil
	})
	for i := len(subs) - 1; i >= 0; i-- {
		d := subs[i]
		for attempt := 0; ; attempt++ {
			if err := os.Remove(d); err == nil || os.IsNotExist(err) {
				break
			} else if attempt == 200 {
				t.Errorf("cgroup %s left behind: %v", d, err)
				break
			}
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, p := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(p); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			time.Sleep(10 * time.Millisecond) // a killed process leaves its cgroup when reaped
		}
	}
}

// path is p of the manager's namespace as the test reaches it.
func (m *systemdManager) path(p string) string { return fmt.Sprintf("/proc/%d/root%s", m.pid, p) }

// logFile is where a unit's output goes (in the manager's namespace).
func (m *systemdManager) logFile(unit string) string { return m.base + "/" + unit + ".log" }

// run runs a command in the manager's namespace.
func (m *systemdManager) run(args ...string) (string, error) {
	argv := append(append([]string{}, m.enter...), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

// ctl runs systemctl against the manager.
func (m *systemdManager) ctl(args ...string) (string, error) {
	return m.run(append([]string{"systemctl", "--user", "--no-pager"}, args...)...)
}

// show is one property of a unit.
func (m *systemdManager) show(unit, prop string) string {
	m.t.Helper()
	out, err := m.ctl("show", "--value", "-p", prop, unit)
	if err != nil {
		m.t.Fatalf("systemctl show %s %s: %v %s", unit, prop, err, out)
	}
	return strings.TrimSpace(out)
}

// waitShow waits until a unit's property satisfies ok (the manager announces nothing
// the test could wait on).
func (m *systemdManager) waitShow(unit, prop, what string, ok func(string) bool) string {
	m.t.Helper()
	var v string
	poll(m.t, fmt.Sprintf("%s: %s %s", unit, prop, what), func() bool { v = m.show(unit, prop); return ok(v) })
	return v
}

// log follows a unit's output file.
func (m *systemdManager) log(unit string) *logWatch {
	m.t.Helper()
	return startProc(m.t, "sh", "-c", `exec tail -n +1 -F "$0" >&2 2>/dev/null`, m.path(m.logFile(unit))).stderr
}

func (m *systemdManager) writeFile(p, content string, perm os.FileMode) {
	m.t.Helper()
	if err := os.MkdirAll(filepath.Dir(m.path(p)), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(m.path(p), []byte(content), perm); err != nil {
		m.t.Fatal(err)
	}
}

func contains(s string) func(string) bool {
	return func(v string) bool { return strings.Contains(v, s) }
}

// The shipped units under a real systemd, with their sandboxing, in a network namespace
// of the test's: the hub is active only once it serves (Type=notify) and keeps a status
// line; its nftables table works inside the sandbox; a wrong hub.yaml fails 'systemctl
// reload', and a refused reload shows in the status and keeps the hub; a hung hub
// misses its watchdog and is restarted with its goroutines' stacks in the log; the
// agent is ready once it listens, learns the hub's key into the one folder it may
// write, says in its status whether its session is up, answers its watchdog until it
// hangs, and a bad key file fails its start with a clear message.
func TestSystemdUnits(t *testing.T) {
	ns := netns(t)
	m := startSystemd(t, ns, map[string]string{
		// The shipped 30 s and 60 s would make the test wait that long for a restart;
		// with restarts 1 s apart, systemd's default start limit (5 in 10 s) would stop
		// a hub that keeps failing within the test's wait, if the unit did not lift it.
		"iotsafe-hub":   "WatchdogSec=5s\nRestartSec=1s\n",
		"iotsafe-agent": "WatchdogSec=5s\n",
	})
	// Where %S, the state folders' root, is for this manager.
	execStart := m.show("iotsafe-hub", "ExecStart")
	dataArg := regexp.MustCompile(`--data (\S+)`).FindStringSubmatch(execStart)
	if dataArg == nil {
		t.Fatalf("no --data in the hub's ExecStart: %s", execStart)
	}
	data := dataArg[1]
	hubYAML := "log: {format: json}\naccess: {kernel: on}\nssh:\n  listen: 127.0.0.1:2222\n"
	m.writeFile(data+"/hub.yaml", hubYAML, 0o600)
	os.Chmod(m.path(data), 0o711)
	if out, err := m.ctl("start", "iotsafe-hub"); err != nil {
		t.Fatalf("systemctl start iotsafe-hub: %v %s\n%s", err, out, m.logText("iotsafe-hub"))
	}
	hubLog := m.log("iotsafe-hub")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hub log:\n%s\nagent log:\n%s", hubLog.tail(60), m.logText("iotsafe-agent"))
		}
	})
	// Type=notify: start returned once the hub said it serves.
	if st := m.show("iotsafe-hub", "ActiveState"); st != "active" {
		t.Fatalf("hub unit %s after start", st)
	}
	if st := m.show("iotsafe-hub", "StatusText"); st != "devices online: 0, forwarded connections: 0" {
		t.Fatalf("hub status %q", st)
	}
	hubLog.waitText(t, "hub listening for devices")
	// The kernel layer, under CapabilityBoundingSet, RestrictAddressFamilies and the
	// system call filter.
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").CombinedOutput(); err != nil {
		t.Fatalf("the hub's nftables table under the unit's sandbox: %v %s", err, out)
	}

	h := &hubProc{t: t, data: data, cliWrap: m.enter}
	keys := m.config + "/iotsafe"
	h.mustCLI("device", "add", "dev1", "--keygen", keys)
	app := serveIn(t, ns, "sensor under systemd")
	knownHosts := filepath.Dir(data) + "/iotsafe-agent/known_hosts"
	agentYAML := fmt.Sprintf("hub: 127.0.0.1:2222\nkey: %s/dev1\nknown_hosts: %s\ntrust_on_first_use: true\nexpose: [http=%s]\nlog: {format: json}\n", keys, knownHosts, app)
	m.writeFile(keys+"/agent.yaml", agentYAML, 0o600)
	if out, err := m.ctl("start", "iotsafe-agent"); err != nil {
		t.Fatalf("systemctl start iotsafe-agent: %v %s\n%s", err, out, m.logText("iotsafe-agent"))
	}
	agentLog := m.log("iotsafe-agent")
	agentLog.wait(t, "session up")
	m.waitShow("iotsafe-agent", "StatusText", "session up", contains("session up with 127.0.0.1:2222: exposing http"))
	if got, err := exec.Command("ip", "netns", "exec", ns, "curl", "-sS", "--fail", "--max-time", "20", "http://"+h.socket("dev1", "http")+"/").CombinedOutput(); err != nil || string(got) != "sensor under systemd" {
		t.Fatalf("the device's service through the hub: %q %v", got, err)
	}
	// The agent wrote the hub's key into its state folder, the only one it may write.
	if b, err := os.ReadFile(m.path(knownHosts)); err != nil || !strings.Contains(string(b), "ssh-ed25519 ") {
		t.Fatalf("known_hosts in the agent's state folder: %v %q", err, b)
	}
	m.waitShow("iotsafe-hub", "StatusText", "one device online", contains("devices online: 1,"))

	// A wrong hub.yaml: 'systemctl reload' fails and says why (the unit checks it
	// first); a SIGHUP all the same is refused by the hub, which keeps running and says
	// so in its status line until a reload succeeds.
	m.writeFile(data+"/hub.yaml", hubYAML+"no_such_setting: 1\n", 0o600)
	if out, err := m.ctl("reload", "iotsafe-hub"); err == nil {
		t.Fatalf("systemctl reload took a wrong hub.yaml: %s", out)
	}
	hubLog.waitText(t, "no_such_setting (line 5): field no_such_setting not found")
	if out, err := m.ctl("kill", "--signal=SIGHUP", "iotsafe-hub"); err != nil {
		t.Fatalf("systemctl kill: %v %s", err, out)
	}
	m.waitShow("iotsafe-hub", "StatusText", "the refusal", contains("last reload refused: "))
	hubLog.waitText(t, "reload refused")
	m.writeFile(data+"/hub.yaml", hubYAML, 0o600)
	if out, err := m.ctl("reload", "iotsafe-hub"); err != nil {
		t.Fatalf("systemctl reload: %v %s", err, out)
	}
	m.waitShow("iotsafe-hub", "StatusText", "the refusal gone", func(v string) bool { return !strings.Contains(v, "refused") })
	if st := m.show("iotsafe-hub", "ActiveState"); st != "active" {
		t.Fatalf("hub %s after reloads", st)
	}

	// A hung hub: no more keep-alives, so systemd aborts it (the stacks go to its log)
	// and starts it again; the agent comes back to it.
	pid, _ := strconv.Atoi(m.show("iotsafe-hub", "MainPID"))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	m.waitShow("iotsafe-hub", "NRestarts", "1 (the watchdog)", func(v string) bool { return v == "1" })
	m.waitShow("iotsafe-hub", "ActiveState", "active again", func(v string) bool { return v == "active" })
	hubLog.waitText(t, "SIGABRT")
	hubLog.waitText(t, "goroutine ")
	if r := m.show("iotsafe-hub", "ExecMainPID"); r == strconv.Itoa(pid) {
		t.Fatal("the same hub process after the watchdog")
	}
	agentLog.waitN(t, 2, "session up")
	m.waitShow("iotsafe-hub", "StatusText", "the device back", contains("devices online: 1,"))

	// The agent answers its watchdog while it works: not restarted through everything
	// above (longer than its 5 s), until it hangs.
	if n := m.show("iotsafe-agent", "NRestarts"); n != "0" {
		t.Fatalf("a working agent was restarted %s times", n)
	}
	apid, _ := strconv.Atoi(m.show("iotsafe-agent", "MainPID"))
	if err := syscall.Kill(apid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	m.waitShow("iotsafe-agent", "NRestarts", "1 (the watchdog)", func(v string) bool { return v == "1" })
	agentLog.waitN(t, 3, "session up")

	// A clean stop removes the hub's table; the agent says it has no session.
	if out, err := m.ctl("stop", "iotsafe-hub"); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "iotsafe").CombinedOutput(); err == nil {
		t.Fatalf("the hub's table outlived a clean stop:\n%s", out)
	}
	m.waitShow("iotsafe-agent", "StatusText", "no session", contains("no session ("))

	// A bad key file fails the agent's start (it never said ready) and says why.
	m.writeFile(keys+"/agent.yaml", strings.Replace(agentYAML, keys+"/dev1", keys+"/missing", 1), 0o600)
	if out, err := m.ctl("restart", "iotsafe-agent"); err == nil {
		t.Fatalf("the agent started with a missing key file: %s", out)
	}
	agentLog.waitText(t, "--key: open "+keys+"/missing: no such file or directory")

	// A hub that cannot start for a reason that passes (here its port, still held) is
	// tried again for as long as it takes, past systemd's default start limit, and
	// serves once it can.
	held := listenInNetns(t, ns, "127.0.0.1:2222")
	if out, err := m.ctl("start", "--no-block", "iotsafe-hub"); err != nil {
		t.Fatalf("systemctl start --no-block: %v %s", err, out)
	}
	m.waitShow("iotsafe-hub", "NRestarts", "5 (6 starts, over the default limit)", func(v string) bool { n, _ := strconv.Atoi(v); return n >= 5 })
	hubLog.waitText(t, "address already in use")
	if st := m.show("iotsafe-hub", "ActiveState"); st == "failed" {
		t.Fatalf("the start limit stopped a hub waiting for its port:\n%s", m.logText("iotsafe-hub"))
	}
	held.Close()
	m.waitShow("iotsafe-hub", "ActiveState", "active once the port is free", func(v string) bool { return v == "active" })

	// A wrong hub.yaml is not retried: the hub exits 78 and the unit fails at once.
	if out, err := m.ctl("stop", "iotsafe-hub"); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	m.writeFile(data+"/hub.yaml", hubYAML+"no_such_setting: 1\n", 0o600)
	if out, err := m.ctl("start", "iotsafe-hub"); err == nil {
		t.Fatalf("the hub started with a wrong hub.yaml: %s", out)
	}
	if st, code, n := m.show("iotsafe-hub", "ActiveState"), m.show("iotsafe-hub", "ExecMainStatus"), m.show("iotsafe-hub", "NRestarts"); st != "failed" || code != "78" || n != "0" {
		t.Fatalf("a wrong hub.yaml: unit %s, exit status %s, %s restarts; want failed, 78, 0", st, code, n)
	}
}

// logText is what the manager says of a unit and the unit's output so far (for
// failure messages).
func (m *systemdManager) logText(unit string) string {
	st, _ := m.ctl("status", unit)
	b, _ := os.ReadFile(m.path(m.logFile(unit)))
	return st + "\n" + string(b)
}
