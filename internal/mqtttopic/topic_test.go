package mqtttopic

import (
	"strings"
	"testing"
)

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a/b", "a/b", true}, {"a/b", "a/c", false}, {"a/+", "a/c", true}, {"a/#", "a", true},
		{"a/#", "a/b/c", true}, {"a/b", "a/b/c", false}, {"+/+", "a/b", true}, {"+", "a/b", false},
		{"#", "x/y", true}, {"a/+/c", "a/b/d", false}, {"site1/devices/#", "site1/commands/#", false},
	} {
		if got := Overlap(c.a, c.b); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v", c.a, c.b, got)
		}
		if got := Overlap(c.b, c.a); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v (not symmetric)", c.b, c.a, got)
		}
	}
}

// FuzzOverlap checks Overlap against matching: if a topic matches both filters, they
// overlap (Overlap may say yes without such a topic in hand, never no with one).
func FuzzOverlap(f *testing.F) {
	for _, s := range [][3]string{{"a/#", "a", "a"}, {"+/b", "a/+", "a/b"}, {"#", "$x", "x"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, a, b, topic string) {
		if ValidFilter(a) != nil || ValidFilter(b) != nil || strings.ContainsAny(topic, "+#") || topic == "" {
			return
		}
		if Match(a, topic) && Match(b, topic) && !Overlap(a, b) {
			t.Fatalf("%q and %q both match %q but Overlap says no", a, b, topic)
		}
		if Overlap(a, b) != Overlap(b, a) {
			t.Fatalf("Overlap(%q, %q) not symmetric", a, b)
		}
	})
}

func TestUnshare(t *testing.T) {
	for in, want := range map[string]string{
		"$share/g/devices/dev1/x":                  "devices/dev1/x",
		"$share/workers/devices/+/notifications/#": "devices/+/notifications/#",
		"devices/dev1/x":                           "devices/dev1/x",
	} {
		if got, _, err := Unshare(in); err != nil || got != want {
			t.Errorf("Unshare(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"$share/", "$share/g", "$share//devices/x", "$share/g+/devices/x", "$share/#/x", "$share/g/"} {
		if _, shared, err := Unshare(bad); !shared || err == nil {
			t.Errorf("Unshare(%q): shared %v, err %v; want an error", bad, shared, err)
		}
	}
}
