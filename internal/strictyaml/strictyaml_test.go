package strictyaml

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	Every time.Duration `yaml:"every"`
	Names []string      `yaml:"names"`
}

type outer struct {
	Name  string `yaml:"name"`
	Inner inner  `yaml:"inner"`
}

func TestErrorsNameThePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"name: [1]\n", "name (line 1)"},
		{"inner:\n  every: banana\n", "inner.every (line 2)"},
		{"inner:\n  evry: 1s\n", "evry"},
		{"inner: {names: {a: 1}}\n", "inner.names"}, // flow style: one line, so the path may go one level deeper
		{"name: x\n  bad indent: 1\n", "line 2"},
	} {
		var o outer
		err := Decode([]byte(tc.in), &o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want error containing %q, got %v", tc.in, tc.want, err)
		}
	}
}

func TestEmptyAndValid(t *testing.T) {
	var o outer
	if err := Decode(nil, &o); err != nil {
		t.Fatal(err)
	}
	if err := Decode([]byte("inner: {every: 2s, names: [a]}\n"), &o); err != nil || o.Inner.Every != 2*time.Second {
		t.Fatalf("%+v %v", o, err)
	}
}
