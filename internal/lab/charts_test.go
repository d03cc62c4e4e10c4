package lab

import (
	"regexp"
	"testing"
)

// A series keeps its colour from figure to figure, whatever else a figure shows and in
// whatever order (issue 52.10): the legend's square follows the name.
func TestChartColourFollowsTheName(t *testing.T) {
	legend := regexp.MustCompile(`<rect x="\d+" y="\d+" width="12" height="12" fill="(#[0-9a-f]+)"/><text x="\d+" y="\d+">([^<]+)</text>`)
	colours := func(ss []Series) map[string]string {
		out := map[string]string{}
		for _, m := range legend.FindAllStringSubmatch(string(LineChart("t", "x", "y", ss, false)), -1) {
			out[m[2]] = m[1]
		}
		return out
	}
	pt := func(name string) Series { return Series{Name: name, X: []float64{1, 2}, Y: []float64{1, 2}} }
	one := colours([]Series{pt("iotsafe"), pt("openssh")})
	two := colours([]Series{pt("dropbear"), pt("openssh"), pt("mosquitto"), pt("iotsafe")})
	for _, n := range []string{"iotsafe", "openssh"} {
		if one[n] == "" || one[n] != two[n] {
			t.Errorf("%s: %q in one figure, %q in the other", n, one[n], two[n])
		}
	}
	seen := map[string]string{}
	for n, c := range two {
		if other, dup := seen[c]; dup {
			t.Errorf("%s and %s share %s in one figure", n, other, c)
		}
		seen[c] = n
	}
}
