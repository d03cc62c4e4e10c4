package cli

import "testing"

// Values from devices and gateways print on one line and send no terminal escapes.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"SSH-2.0-OpenSSH_9.6": "SSH-2.0-OpenSSH_9.6",
		"temperature °C":      "temperature °C",
		"a\nforged line":      `a\nforged line`,
		"clear\x1b[2J":        `clear\x1b[2J`,
		"tab\tand \"quotes\"": `tab\tand "quotes"`,
		"bad utf8 \xff":       `bad utf8 \xff`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}
