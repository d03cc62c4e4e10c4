package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/spf13/cobra"
)

// A wrong hub.yaml exits 78 (EX_CONFIG), which the hub's unit does not retry; a
// registry held by another hub exits 75 (EX_TEMPFAIL); anything else 1.
func TestExitStatus(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte("ssh:\n  listn: 127.0.0.1:2222\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), []string{"hub", "--check-config", "--data", dir}, nil, &out, &errOut)
	if code != exitConfig || !strings.Contains(errOut.String(), "ssh.listn (line 2)") {
		t.Fatalf("a wrong hub.yaml: exit %d, %q", code, errOut.String())
	}
	// The same file for an admin command.
	errOut.Reset()
	if code := Execute(context.Background(), []string{"device", "list", "--data", dir}, nil, &out, &errOut); code != exitConfig {
		t.Fatalf("device list with a wrong hub.yaml: exit %d, %q", code, errOut.String())
	}
	for err, want := range map[error]int{
		fmt.Errorf("registry: lease: %w: hub h1 held by ...", registry.ErrInUse):    exitTempFail,
		fmt.Errorf("%w (postgres): now held by %q", registry.ErrLeaseLost, "other"): exitTempFail,
		errors.New("listen tcp 127.0.0.1:2222: bind: address already in use"):       1,
	} {
		if got := exitStatus(err); got != want {
			t.Errorf("exitStatus(%v) = %d, want %d", err, got, want)
		}
	}
}

// Why a command failed reaches the journal at error priority ('journalctl -p err'),
// and stays a plain line elsewhere.
func TestFailureLineInJournal(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte("no_such_setting: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	journal, err := os.Create(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer journal.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(journal.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	args := []string{"hub", "--data", dir}
	if code := Execute(context.Background(), args, nil, io.Discard, journal); code != exitConfig {
		t.Fatalf("exit %d", code)
	}
	b, _ := os.ReadFile(journal.Name())
	if !strings.HasPrefix(string(b), "<3>iotsafe: ") || !strings.Contains(string(b), "no_such_setting") {
		t.Fatalf("in the journal: %q", b)
	}
	var plain bytes.Buffer
	Execute(context.Background(), args, nil, io.Discard, &plain)
	if !strings.HasPrefix(plain.String(), "iotsafe: ") {
		t.Fatalf("elsewhere: %q", plain.String())
	}
}

// A word that is none of a command group's subcommands fails with a suggestion, exits 1
// and touches nothing (issue 52.3: 'device rm dev1' printed help and exited 0); the
// group alone still prints its help and exits 0.
func TestUnknownSubcommandsAreRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), append(args, "--data", dir), nil, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	for args, suggestion := range map[string]string{"device rm dev1": "remove", "device lst": "list", "hostkey rotate": "add",
		"account ls": "list", "device secrets dev1": "secret"} {
		code, out := run(strings.Fields(args)...)
		if code != 1 || !strings.Contains(out, "unknown command") || !strings.Contains(out, "Did you mean this?\n\t"+suggestion+"\n") {
			t.Errorf("iotsafe %s: exit %d, %q; want 1 and a suggestion of %q", args, code, out, suggestion)
		}
	}
	// Every group refuses nonsense.
	var groups []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, k := range c.Commands() {
			if k.HasSubCommands() {
				groups = append(groups, k.CommandPath())
				walk(k)
			}
		}
	}
	walk(rootCmd(&globals{}))
	if len(groups) < 10 {
		t.Fatalf("only %d command groups found: %v", len(groups), groups)
	}
	for _, g := range groups {
		args := append(strings.Fields(g)[1:], "zzqx")
		// Groups that replaced a command taking NAME (device secret) say what it became.
		if code, out := run(args...); code != 1 || !strings.Contains(out, "unknown command \"zzqx\"") && !strings.Contains(out, " rotate zzqx'") {
			t.Errorf("iotsafe %s: exit %d, %q", strings.Join(args, " "), code, out)
		}
	}
	if code, out := run("device"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("iotsafe device alone: exit %d, %q; want its help", code, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused command made the data folder %s", dir)
	}
}

// --check-config runs the checks the start runs: a listen address whose port is no
// number, or out of range, is a wrong configuration (78), not a failed start (issue 52.7).
func TestCheckConfigRefusesBadPorts(t *testing.T) {
	for _, yaml := range []string{"ssh: {listen: '127.0.0.1:abc'}", "frontdoor: {listen: '127.0.0.1:99999', domain: x.test}",
		"metrics: {listen: ':x'}", "mqtt: {tls_listen: '127.0.0.1:https'}", "upstream: {hub: 'centre:0', hub_key: 'SHA256:x', name: gw1}"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte(yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := Execute(context.Background(), []string{"hub", "--check-config", "--data", dir}, nil, &out, &errOut); code != exitConfig || !strings.Contains(errOut.String(), "port") {
			t.Errorf("%s: exit %d, %q; want %d naming the port", yaml, code, errOut.String(), exitConfig)
		}
	}
}

// An admin command on a folder that holds no hub stops, names the folder and creates
// nothing (issue 52.1: a mistyped --data became a new, empty fleet); 'init' creates one,
// and only once.
func TestAdminCommandsNeedAHubFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), append(args, "--data", dir), nil, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	for _, args := range [][]string{{"device", "list"}, {"device", "add", "dev1", "--keygen", t.TempDir()}, {"device", "revoke", "dev1"},
		{"grants"}, {"events"}, {"account", "list"}, {"pool", "move"}} {
		code, out := run(args...)
		if code != 1 || !strings.Contains(out, dir+" (--data) holds no hub") || !strings.Contains(out, "iotsafe init") {
			t.Errorf("iotsafe %v on an empty folder: exit %d, %q", args, code, out)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("iotsafe %v made %s", args, dir)
		}
	}
	if code, out := run("init"); code != 0 || !strings.Contains(out, "initialised") {
		t.Fatalf("init: exit %d, %q", code, out)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("the data folder init made: %v %v", fi, err)
	}
	if code, out := run("device", "add", "dev1", "--keygen", t.TempDir()); code != 0 {
		t.Fatalf("device add after init: exit %d, %q", code, out)
	}
	if code, out := run("init"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("init again: exit %d, %q", code, out)
	}
	if code, out := run("device", "list"); code != 0 || !strings.Contains(out, "dev1") {
		t.Fatalf("the device init's registry holds: exit %d, %q", code, out)
	}
}

// 'iotsafe --help' sections every command by what the operator is doing (issue 52.9):
// a new command must be put in one.
func TestEveryCommandHasAHelpSection(t *testing.T) {
	for _, c := range rootCmd(&globals{}).Commands() {
		if c.GroupID == "" && !c.Hidden && c.Name() != "data" {
			t.Errorf("command %q is in no section of 'iotsafe --help': add it to commandGroups", c.Name())
		}
	}
}

// 'device remove' says the device's grants went with it (issue 52.6).
func TestDeviceRemoveSaysItsGrantsGo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hub")
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Execute(context.Background(), append(args, "--data", dir), nil, &out, &errOut); code != 0 {
			t.Fatalf("iotsafe %v: %d %s", args, code, errOut.String())
		}
		return out.String()
	}
	run("init")
	run("device", "add", "dev1", "--keygen", t.TempDir())
	run("grant", "--user", "0", "dev1", "http")
	run("grant", "--group", "0", "dev1", "http")
	if out := run("device", "remove", "dev1"); !strings.Contains(out, "removed dev1 and its 2 grant(s)") {
		t.Fatalf("device remove said: %s", out)
	}
	if out := run("grants"); strings.Contains(out, "dev1") {
		t.Fatalf("the grants stayed: %s", out)
	}
}
