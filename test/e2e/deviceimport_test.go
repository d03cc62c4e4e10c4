package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshtest"
)

// importKey is a fresh device public key in authorized_keys form.
func importKey(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshtest.Signer(t).PublicKey())))
}

// An operator enrolls a fleet from a list of names and keys: with no hub running (one
// registry open for the list), then through the running hub with telemetry secrets that
// work at once; a malformed list enrolls nothing, and a name already enrolled stops the
// import there, saying how many went in.
func TestDeviceImport(t *testing.T) {
	h := startHub(t, "", "rest: {listen: '127.0.0.1:0'}\n")
	h.stop()
	list := func(content string) string {
		p := filepath.Join(t.TempDir(), "fleet.txt")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out := h.mustCLI("device", "import", list("# building A\ndev1 "+importKey(t)+" cam\n\ndev2\t"+importKey(t)+"\n"), "--group", "building-a")
	if !strings.Contains(out, "enrolled 2 device(s) with profile default") || !strings.Contains(out, "no hub answered") {
		t.Fatalf("offline import: %s", out)
	}
	if d := h.device("dev2"); d.Address == "" || len(d.Keys) != 1 {
		t.Fatalf("dev2: %+v", d)
	}

	// Nothing of a malformed list is enrolled; the error names the line.
	out, err := h.cli("device", "import", list("dev3 "+importKey(t)+"\ndev4 ssh-ed25519 not-base64\n"))
	if err == nil || !strings.Contains(out, "line 2: device dev4: not an OpenSSH public key") {
		t.Fatalf("malformed list: %v\n%s", err, out)
	}
	if out, err := h.cli("device", "show", "dev3"); err == nil {
		t.Fatalf("dev3 of a refused list enrolled:\n%s", out)
	}
	out, err = h.cli("device", "import", list("dev5 "+importKey(t)+"\nBad_Name "+importKey(t)+"\n"))
	if err == nil || !strings.Contains(out, `line 2: device name "Bad_Name"`) {
		t.Fatalf("bad name: %v\n%s", err, out)
	}

	// Through the running hub, with secrets, as JSON: a device of the list logs in to the
	// REST API with its secret at once.
	h.start()
	cmd := h.cliCommand("device", "import", "-", "--secrets", "-o", "json", "--data", h.data)
	cmd.Stdin = strings.NewReader("dev6 " + importKey(t) + "\ndev7 " + importKey(t) + "\n")
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("import through the hub: %v", err)
	}
	type enrolled struct {
		Name    string            `json:"name"`
		Address string            `json:"address"`
		Sockets map[string]string `json:"sockets"`
		Secret  string            `json:"secret"`
	}
	var got []enrolled
	sc := bufio.NewScanner(strings.NewReader(string(stdout)))
	for sc.Scan() {
		var d enrolled
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		got = append(got, d)
	}
	if len(got) != 2 || got[0].Name != "dev6" || got[1].Name != "dev7" || got[0].Secret == "" || got[0].Address == "" {
		t.Fatalf("JSON lines: %s", stdout)
	}
	c := &http.Client{}
	code, body, _ := restCall(t, c, "POST", "http://"+h.rest+"/api/rest/token", "", map[string]string{"login": "dev7", "password": got[1].Secret})
	if code != http.StatusCreated && code != http.StatusOK || body["accessToken"] == nil {
		t.Fatalf("dev7's secret from the import: %d %v", code, body)
	}

	// A name already enrolled stops the import there; those before it stay enrolled.
	out, err = h.cli("device", "import", list("dev8 "+importKey(t)+"\ndev1 "+importKey(t)+"\ndev9 "+importKey(t)+"\n"))
	if err == nil || !strings.Contains(out, "device dev1 (2 of 3)") || !strings.Contains(out, "the 1 before it are enrolled") {
		t.Fatalf("import over an enrolled name: %v\n%s", err, out)
	}
	h.device("dev8")
	if out, err := h.cli("device", "show", "dev9"); err == nil {
		t.Fatalf("dev9 after the failed line enrolled:\n%s", out)
	}

	// Re-running a list with --skip-existing: devices enrolled with the same key are left
	// as they are (dev6 keeps its secret), the rest are enrolled.
	key6 := h.device("dev6").Keys[0].Fingerprint
	rerun := list("dev10 " + importKey(t) + "\n")
	out, err = h.cli("device", "import", rerun, "--skip-existing")
	if err != nil || !strings.Contains(out, "enrolled 1 device(s)") {
		t.Fatalf("--skip-existing with nothing enrolled yet: %v\n%s", err, out)
	}
	again := filepath.Join(t.TempDir(), "again.txt")
	b, _ := os.ReadFile(rerun)
	os.WriteFile(again, append(b, "dev11 "+importKey(t)+"\n"...), 0o600)
	cmd = h.cliCommand("device", "import", again, "--skip-existing", "-o", "json", "--data", h.data)
	stdout, err = cmd.Output()
	if err != nil {
		t.Fatalf("re-run import: %v", err)
	}
	if !strings.Contains(string(stdout), `"name":"dev10"`) || !strings.Contains(string(stdout), `"skipped":"already enrolled with this key"`) ||
		!strings.Contains(string(stdout), `"name":"dev11"`) || strings.Count(string(stdout), "skipped") != 1 {
		t.Fatalf("re-run import as JSON:\n%s", stdout)
	}
	h.device("dev11")

	// A name enrolled with another key, or a key under another name, is a conflict:
	// every one is listed and nothing of the list is enrolled.
	d6 := h.device("dev6")
	if d6.Keys[0].Fingerprint != key6 {
		t.Fatalf("dev6's key changed: %+v", d6)
	}
	k12 := importKey(t)
	out, err = h.cli("device", "import", list("dev12 "+k12+"\ndev6 "+importKey(t)+"\ndev13 "+strings.SplitN(string(b), " ", 2)[1]), "--skip-existing")
	if err == nil || !strings.Contains(out, "2 device(s) of the list conflict") || !strings.Contains(out, "device dev6: enrolled with another key") ||
		!strings.Contains(out, "device dev13: its key is enrolled as device dev10") || !strings.Contains(out, "nothing was enrolled") {
		t.Fatalf("conflicting re-run: %v\n%s", err, out)
	}
	if out, err := h.cli("device", "show", "dev12"); err == nil {
		t.Fatalf("dev12 of a conflicting list enrolled:\n%s", out)
	}
}
