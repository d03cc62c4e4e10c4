package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	h := startHub(t, "", "")
	key := h.addDevice("dev1")
	h.addDevice("dev2")
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
	for _, want := range []string{"devices         2 rows", "sockets         2 rows", "every table's count checked", "next: set  registry: {dsn:"} {
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
		Database string `json:"database"`
		Tables   []struct {
			Table string `json:"table"`
			Rows  int    `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(h.mustCLIStdout("registry", "info", "--json")), &info); err != nil || info.Database != "postgres" {
		t.Fatalf("registry info: %+v %v", info, err)
	}
	if d := h.device("dev2"); d.Revoked == nil {
		t.Fatal("dev2's revocation was lost in the move")
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
}

// Two hubs share one PostgreSQL registry under their own names: a device with both
// hubs in its agent's list is recorded at the hub that holds its session, moves to the
// other when its hub is killed (same protected socket address, served again), and a
// revocation written through the dead hub's data folder reaches the live hub through
// the registry alone (LISTEN/NOTIFY).
func TestHubsShareAPostgresRegistry(t *testing.T) {
	dsn := pgscratch.Start(t).Database(t)
	hubNamed := func(name string) *hubProc {
		data := t.TempDir()
		// One registry, one pool: the same range for both hubs.
		cfg := fmt.Sprintf("log: {level: debug, format: json}\naccess: {kernel: off}\npool: {cidr: 127.78.9.0/24}\nregistry: {dsn: %q, hub_name: %s}\nssh:\n  listen: 127.0.0.1:0\n", dsn, name)
		if err := os.WriteFile(filepath.Join(data, "hub.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return startHub(t, data, "")
	}
	a, b := hubNamed("edge-a"), hubNamed("edge-b")
	key := a.addDevice("dev1")
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
	b.log.wait(t, "closed sessions after a registry change the admin socket did not deliver", "device", "dev1")
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
