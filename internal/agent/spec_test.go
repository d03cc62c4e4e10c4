package agent

import (
	"errors"
	"strings"
	"testing"
)

func TestParseExpose(t *testing.T) {
	for _, tc := range []struct {
		in, alias, target, err string
	}{
		{in: "http=127.0.0.1:80", alias: "http", target: "127.0.0.1:80"},
		{in: "http=8080", alias: "http", target: "127.0.0.1:8080"},
		{in: "cam=[::1]:554", alias: "cam", target: "[::1]:554"},
		{in: "http", err: "want ALIAS=HOST:PORT"},
		{in: "HTTP=127.0.0.1:80", err: "lower-case"},
		{in: "http=127.0.0.1:0", err: "port must be"},
		{in: "http=:80", err: "empty host"},
		{in: "http=127.0.0.1", err: "want HOST:PORT"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			e, err := ParseExpose(tc.in)
			if tc.err != "" {
				if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil || e.Alias != tc.alias || e.Target != tc.target {
				t.Fatalf("got %+v %v", e, err)
			}
		})
	}
}

func TestParseForward(t *testing.T) {
	f, err := ParseForward("127.0.0.1:1883=broker")
	if err != nil || f.Listen != "127.0.0.1:1883" || f.Alias != "broker" {
		t.Fatalf("got %+v %v", f, err)
	}
	if _, err := ParseForward("broker=127.0.0.1:1883"); !errors.Is(err, ErrSpec) {
		t.Fatalf("reversed spec accepted: %v", err)
	}
}

// FuzzParseSpecs: parsing never panics and accepted specs are canonical.
func FuzzParseSpecs(f *testing.F) {
	for _, s := range []string{"http=127.0.0.1:80", "127.0.0.1:1883=broker", "a=1", "=", "x=[::1]:99999", "é=1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if e, err := ParseExpose(s); err == nil {
			again, err := ParseExpose(e.Alias + "=" + e.Target)
			if err != nil || again != e {
				t.Fatalf("expose %q -> %+v not stable: %+v %v", s, e, again, err)
			}
		}
		if fw, err := ParseForward(s); err == nil {
			again, err := ParseForward(fw.Listen + "=" + fw.Alias)
			if err != nil || again != fw {
				t.Fatalf("forward %q -> %+v not stable: %+v %v", s, fw, again, err)
			}
		}
	})
}
