package restapi

import (
	"regexp"
	"strings"
	"testing"
)

// likeRegexp is the reference: LIKE's % and _ as a regular expression.
func likeRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range p {
		switch r {
		case '%':
			b.WriteString("(?s:.*)")
		case '_':
			b.WriteString("(?s:.)")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func TestLikeMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"dev%", "dev42", true}, {"%42", "dev42", true}, {"d_v4_", "dev42", true},
		{"dev_", "dev42", false}, {"%", "", true}, {"", "x", false}, {"%a%b%", "xaxxbx", true},
	} {
		if got := likeMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("%q LIKE %q: %v", tc.s, tc.p, got)
		}
	}
	// A pattern built to make a naive matcher exponential answers at once.
	if likeMatch(strings.Repeat("%a", 200)+"b", strings.Repeat("a", 5000)) {
		t.Error("matched")
	}
}

func FuzzLikeMatch(f *testing.F) {
	f.Add("dev%", "dev42")
	f.Add("%_%", "x")
	f.Fuzz(func(t *testing.T, p, s string) {
		// Byte-wise like the matcher: compare on ASCII only.
		for _, c := range p + s {
			if c > 127 {
				return
			}
		}
		if got, want := likeMatch(p, s), likeRegexp(p).MatchString(s); got != want {
			t.Fatalf("%q LIKE %q: %v, reference says %v", s, p, got, want)
		}
	})
}

// Query parameters of polls are untrusted input: any value gives a filter or a clear
// error, never a panic or a negative page.
func FuzzPollFilter(f *testing.F) {
	f.Add("2026-11-23T10:00:00.123456", "temp,hum", "10")
	f.Add("", "", "-1")
	f.Fuzz(func(t *testing.T, ts, names, limit string) {
		flt, err := pollFilter(map[string][]string{"timestamp": {ts}, "names": {names}, "limit": {limit}}, []string{"dev1"})
		if err == nil && flt.Take < 0 {
			t.Fatalf("negative take from %q", limit)
		}
	})
}
