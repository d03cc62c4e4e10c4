package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
)

// Join tokens (issue 51, item 1): a device makes its own key and enrols it with a
// token, then runs as any device; the stock ssh client does the same with ssh-keygen
// and one ssh call; a name outside the token's pattern, a name taken, a used-up or
// revoked token are refused with the reason, leave nothing behind, and are audited.
func TestJoinTokens(t *testing.T) {
	h := startHub(t, "", "")
	var tok struct {
		ID     int64  `json:"id"`
		Token  string `json:"token"`
		Hub    string `json:"hub"`
		HubKey string `json:"hub_key"`
	}
	if err := json.Unmarshal([]byte(h.mustCLIStdout("token", "create", "--names", "sensor-*", "--uses", "2", "--label", "batch 7", "-o", "json")), &tok); err != nil {
		t.Fatal(err)
	}
	if tok.Hub != h.addr || tok.HubKey != h.hostFP || tok.Token == "" {
		t.Fatalf("token create: %+v (hub %s %s)", tok, h.addr, h.hostFP)
	}
	join := func(name, dir string, token string) (string, error) {
		out, err := exec.Command(iotsafeBin, "agent", "join", "--hub", tok.Hub, "--hub-key", tok.HubKey, "--token", token, "--name", name, "--dir", dir).CombinedOutput()
		return string(out), err
	}
	dir := t.TempDir()
	if out, err := join("sensor-1", dir, tok.Token); err != nil || !strings.Contains(out, "joined as sensor-1") {
		t.Fatalf("join: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sensor-1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the device's private key: %v %v", fi, err)
	}
	if d := h.device("sensor-1"); len(d.Keys) != 1 {
		t.Fatalf("the joined device: %+v", d)
	}
	a := startProc(t, iotsafeBin, "agent", "--agent-config", filepath.Join(dir, "agent.yaml"), "--expose", "http=127.0.0.1:9", "--log-format", "json")
	a.stderr.wait(t, "session up")

	for _, tc := range []struct{ what, name, says string }{
		{"a name outside the pattern", "camera-1", "for names sensor-*"},
		{"a name taken", "sensor-1", "exists"},
	} {
		d := t.TempDir()
		out, err := join(tc.name, d, tok.Token)
		if err == nil || !strings.Contains(out, tc.says) {
			t.Errorf("%s: %v\n%s", tc.what, err, out)
		}
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s: left %v behind", tc.what, left)
		}
	}

	// The stock OpenSSH client: the key made with ssh-keygen, one ssh call, then a
	// session as the device.
	key := keygen(t, t.TempDir(), "sensor-2")
	stock := append(sshArgs(h, key)[1:], "-T", "iotsafe-join@127.0.0.1", "join", "sensor-2", tok.Token)
	if out, err := exec.Command(needTool(t, "ssh"), stock...).CombinedOutput(); err != nil || !strings.Contains(string(out), `"device":"sensor-2"`) {
		t.Fatalf("stock ssh join: %v\n%s", err, out)
	}
	// Used up now.
	out, err := join("sensor-3", t.TempDir(), tok.Token)
	if err == nil || !strings.Contains(out, "used up") {
		t.Fatalf("a third join with a two-use token: %v\n%s", err, out)
	}
	// A revoked token.
	var tok2 struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	json.Unmarshal([]byte(h.mustCLIStdout("token", "create", "--names", "x-*", "-o", "json")), &tok2)
	h.mustCLI("token", "revoke", jsonNumber(tok2.ID))
	if out, err := join("x-1", t.TempDir(), tok2.Token); err == nil || !strings.Contains(out, "revoked") {
		t.Fatalf("a revoked token: %v\n%s", err, out)
	}
	if list := h.mustCLIStdout("token", "list"); !strings.Contains(list, "used up") || !strings.Contains(list, "revoked") || !strings.Contains(list, "batch 7") {
		t.Fatalf("token list:\n%s", list)
	}
	ev := h.mustCLIStdout("events", "--kind", "join_refused")
	if !strings.Contains(ev, "camera-1") || !strings.Contains(ev, "used up") {
		t.Fatalf("the refusals in the audit log:\n%s", ev)
	}
}

// A token of --approve manual: the device joins and waits; its agent is refused, saying
// so, until the operator approves it, then its session comes up; a rejected one is
// removed and its name free again.
func TestJoinPendingApproval(t *testing.T) {
	h := startHub(t, "", "")
	var tok struct {
		Token  string `json:"token"`
		Hub    string `json:"hub"`
		HubKey string `json:"hub_key"`
	}
	json.Unmarshal([]byte(h.mustCLIStdout("token", "create", "--names", "door-*", "--uses", "2", "--approve", "manual", "-o", "json")), &tok)
	join := func(name string) string {
		dir := t.TempDir()
		out, err := exec.Command(iotsafeBin, "agent", "join", "--hub", tok.Hub, "--hub-key", tok.HubKey, "--token", tok.Token, "--name", name, "--dir", dir).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "iotsafe device approve "+name) {
			t.Fatalf("join %s: %v\n%s", name, err, out)
		}
		return dir
	}
	dir := join("door-1")
	if list := h.mustCLIStdout("device", "list"); !strings.Contains(list, "pending approval") {
		t.Fatalf("device list:\n%s", list)
	}
	a := startProc(t, iotsafeBin, "agent", "--agent-config", filepath.Join(dir, "agent.yaml"), "--expose", "http=127.0.0.1:9", "--log-format", "json")
	a.stderr.waitText(t, "waits for the operator's approval")
	h.mustCLI("device", "approve", "door-1")
	a.stderr.wait(t, "session up")
	if out, err := h.cli("device", "approve", "door-1"); err == nil {
		t.Fatalf("approving twice: %s", out)
	}
	join("door-2")
	h.mustCLI("device", "reject", "door-2")
	if out, err := h.cli("device", "show", "door-2"); err == nil {
		t.Fatalf("a rejected device is still there: %s", out)
	}
	if out, err := h.cli("device", "reject", "door-1"); err == nil || !strings.Contains(out, "not waiting for approval") {
		t.Fatalf("rejecting an approved device: %v %s", err, out)
	}
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Join tokens on a PostgreSQL registry: the token made, a device joined and up, the
// token used up; the same transaction on the other database.
func TestJoinTokensOnPostgres(t *testing.T) {
	dsn := pgscratch.Start(t).Database(t)
	h := startHub(t, "", "registry: {dsn: \""+dsn+"\"}\n")
	var tok struct {
		Token  string `json:"token"`
		Hub    string `json:"hub"`
		HubKey string `json:"hub_key"`
	}
	if err := json.Unmarshal([]byte(h.mustCLIStdout("token", "create", "--names", "pg-*", "-o", "json")), &tok); err != nil {
		t.Fatal(err)
	}
	join := func(name string) (string, string, error) {
		dir := t.TempDir()
		out, err := exec.Command(iotsafeBin, "agent", "join", "--hub", tok.Hub, "--hub-key", tok.HubKey, "--token", tok.Token, "--name", name, "--dir", dir).CombinedOutput()
		return dir, string(out), err
	}
	dir, out, err := join("pg-1")
	if err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	startProc(t, iotsafeBin, "agent", "--agent-config", filepath.Join(dir, "agent.yaml"), "--expose", "http=127.0.0.1:9", "--log-format", "json").stderr.wait(t, "session up")
	if _, out, err := join("pg-2"); err == nil || !strings.Contains(out, "used up") {
		t.Fatalf("a second join with a one-use token: %v\n%s", err, out)
	}
}

// A device joining at a gateway hub with the gateway's token is the gateway's device,
// announced to the centre as any other: the centre serves it through the gateway.
func TestJoinAtAGateway(t *testing.T) {
	p := startGatewayPair(t)
	var tok struct {
		Token  string `json:"token"`
		Hub    string `json:"hub"`
		HubKey string `json:"hub_key"`
	}
	if err := json.Unmarshal([]byte(p.gw.mustCLIStdout("token", "create", "--names", "cam-*", "-o", "json")), &tok); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, err := exec.Command(iotsafeBin, "agent", "join", "--hub", tok.Hub, "--hub-key", tok.HubKey, "--token", tok.Token, "--name", "cam-1", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("join at the gateway: %v\n%s", err, out)
	}
	app := deviceApp(t, "hello from cam-1, joined at gw1")
	startProc(t, iotsafeBin, "agent", "--agent-config", filepath.Join(dir, "agent.yaml"), "--expose", "http="+hostPortOf(app), "--log-format", "json").stderr.wait(t, "session up")
	p.centre.log.wait(t, "device behind gateway up", "device", "cam-1")
	mustGet(t, p.centre.socket("cam-1", "http"), "hello from cam-1, joined at gw1")
}
