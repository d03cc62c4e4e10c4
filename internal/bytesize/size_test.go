package bytesize

import (
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Size{"1024": 1024, "1KiB": 1024, "10 MiB": 10 << 20, "2MB": 2e6, "0": 0, "7B": 7} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("%q: %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1", "1TiB", "ten", "99999999999GiB", "1.5MiB"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestYAML(t *testing.T) {
	var c struct {
		Max Size `yaml:"max"`
	}
	if err := yaml.Unmarshal([]byte("max: 64KiB\n"), &c); err != nil || c.Max != 64<<10 {
		t.Fatalf("%d, %v", c.Max, err)
	}
	if err := yaml.Unmarshal([]byte("max: lots\n"), &c); err == nil {
		t.Fatal("a size that is not one was accepted")
	}
}
