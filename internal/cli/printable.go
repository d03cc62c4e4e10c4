package cli

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable makes a string that came from a device, a gateway or the network safe to
// print on a terminal: control characters and invalid UTF-8 are shown escaped (\n,
// \x1b), so no value can forge a line of output or send a terminal escape sequence.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToASCII(s)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}
