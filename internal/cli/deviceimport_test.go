package cli

import (
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

const importKeyLine = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDy5X8c0m3w7l2m3f9pH8sq1ZlQvS3n7m0s4g2r0Q1aB"

func TestReadImportList(t *testing.T) {
	list, err := readImportList(strings.NewReader("# fleet\n\ndev1 " + importKeyLine + " cam one\n  dev2\t" + importKeyLine + "  \n"))
	if err != nil || len(list) != 2 || list[0].Name != "dev1" || list[1].Name != "dev2" || list[1].Key.Type() != ssh.KeyAlgoED25519 {
		t.Fatalf("%+v %v", list, err)
	}
	for in, want := range map[string]string{
		"dev1\n":                              "line 1: want NAME and an OpenSSH public key",
		"Dev1 " + importKeyLine:               `line 1: device name "Dev1"`,
		"dev1 ssh-ed25519 AAAA\n":             "line 1: device dev1: not an OpenSSH public key",
		"dev1 command=\"x\" " + importKeyLine: "line 1: device dev1: authorized_keys options",
		"dev1 " + importKeyLine + "\ndev1 " + importKeyLine: "line 2: device dev1 is also on line 1",
		"dev1 " + strings.Repeat("A", maxImportLine+1):      "longer than",
	} {
		if _, err := readImportList(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", in, err, want)
		}
	}
}

// FuzzParseImportLine: no line panics; an accepted line's device re-reads the same.
func FuzzParseImportLine(f *testing.F) {
	f.Add("dev1 " + importKeyLine + " comment")
	f.Add("# comment")
	f.Add("dev1\t" + importKeyLine)
	f.Fuzz(func(t *testing.T, line string) {
		d, ok, err := parseImportLine(line)
		if err != nil || !ok {
			return
		}
		again, ok, err := parseImportLine(d.Name + " " + string(ssh.MarshalAuthorizedKey(d.Key)))
		if err != nil || !ok || again.Name != d.Name || string(again.Key.Marshal()) != string(d.Key.Marshal()) {
			t.Fatalf("%q -> %s, again %v %v", line, d.Name, again, err)
		}
	})
}
