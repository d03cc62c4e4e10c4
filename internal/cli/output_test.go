package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// One -o on every command that prints data: json and yaml carry the same fields; an
// unknown format, or a flag value of the wrong kind, is refused in words an operator
// reads, not Go's (issue 52.9).
func TestOutputFormats(t *testing.T) {
	run := cliOn(filepath.Join(t.TempDir(), "hub"))
	run("init")
	run("device", "add", "dev1", "--keygen", t.TempDir())
	for _, args := range [][]string{{"device", "list"}, {"profile", "list"}, {"grants"}, {"events"}, {"pool", "show"}, {"account", "list"}, {"hostkey", "list"}} {
		code, js, e := run(append(args, "-o", "json")...)
		var fromJSON, fromYAML any
		if code != 0 || json.Unmarshal([]byte(js), &fromJSON) != nil {
			t.Fatalf("%v -o json: %d %q %s", args, code, js, e)
		}
		code, ym, e := run(append(args, "-o", "yaml")...)
		if code != 0 || yaml.Unmarshal([]byte(ym), &fromYAML) != nil {
			t.Fatalf("%v -o yaml: %d %q %s", args, code, ym, e)
		}
		// The same data: YAML read back and written as JSON equals the JSON.
		a, _ := json.Marshal(fromJSON)
		b, _ := json.Marshal(fromYAML)
		if string(a) != string(b) {
			t.Errorf("%v: json and yaml differ:\n%s\n%s", args, a, b)
		}
		if _, legacy, _ := run(append(args, "--json")...); legacy != js {
			t.Errorf("%v --json is not -o json", args)
		}
	}
	if _, out, _ := run("profile", "list"); strings.Contains(out, "map[") || !strings.Contains(out, "http=80") {
		t.Errorf("profile list prints Go maps:\n%s", out)
	}
	for args, want := range map[string]string{
		"device list -o xml":            `invalid argument "xml" for "-o, --output" flag: want table, json or yaml`,
		"events --limit ten":            `invalid argument "ten" for "--limit" flag: not a whole number`,
		"device token dev1 --expires 5": `a duration needs a unit (like 30s, 15m, 24h)`,
	} {
		code, _, e := run(strings.Fields(args)...)
		if code != 1 || !strings.Contains(e, want) || strings.Contains(e, "strconv") {
			t.Errorf("iotsafe %s: %d %q", args, code, e)
		}
	}
}

// cliOn runs iotsafe with --data dir and returns its exit status, standard output and
// standard error.
func cliOn(dir string) func(args ...string) (int, string, string) {
	return func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), append(args, "--data", dir), nil, &out, &errOut)
		return code, out.String(), errOut.String()
	}
}
