package lab

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

var chartColors = []string{"#2a7", "#c53", "#57b", "#a5a", "#b92", "#488"}

// LineChart draws Series as an inline SVG: x on a log scale when logX (counts and sizes
// that span orders of magnitude), y linear from 0. Points are marked, so a single N
// still shows.
func LineChart(title, xLabel, yLabel string, ss []Series, logX bool) template.HTML {
	ss = slices.DeleteFunc(ss, func(s Series) bool { return len(s.X) == 0 })
	if len(ss) == 0 {
		return ""
	}
	const w, h, left, right, top, bottom = 640, 280, 60, 150, 30, 45
	var xs []float64
	ymax := 0.0
	for _, s := range ss {
		xs = append(xs, s.X...)
		for _, y := range s.Y {
			ymax = max(ymax, y)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	if ymax <= 0 {
		ymax = 1
	}
	tx := func(x float64) float64 { return x }
	if logX {
		tx = func(x float64) float64 { return math.Log10(max(x, 1e-9)) }
	}
	x0, x1 := tx(xs[0]), tx(xs[len(xs)-1])
	if x1 == x0 {
		x0, x1 = x0-1, x1+1
	}
	px := func(x float64) float64 { return left + (tx(x)-x0)/(x1-x0)*(w-left-right) }
	py := func(y float64) float64 { return top + (1-y/ymax)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" role="img" aria-label="%s">`, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">%s</text>`, left, html.EscapeString(title))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, top, left, h-bottom)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" dy="4">%s</text>`, left-6, py(y), compact(y))
	}
	for _, x := range xs {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`, px(x), h-bottom+16, compact(x))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, (left+w-right)/2, h-8, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`, (top+h-bottom)/2, (top+h-bottom)/2, html.EscapeString(yLabel))
	for i, s := range ss {
		c := chartColors[i%len(chartColors)]
		var pts []string
		for j := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, px(s.X[j]), py(s.Y[j]), c)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), c)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`,
			w-right+10, top+18*i, c, w-right+28, top+18*i+10, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and escaped names only
}

// compact prints axis values: 1500 as 1.5k, 262144 as 262k.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v >= 10 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// MapSeries turns server -> (numeric key -> value) maps into Series.
func MapSeries(m map[string]map[string]float64) []Series {
	var out []Series
	for _, server := range SortedKeys(m) {
		s := Series{Name: server}
		for _, k := range SortedNumKeys(m[server]) {
			var x float64
			fmt.Sscan(k, &x)
			s.X, s.Y = append(s.X, x), append(s.Y, m[server][k])
		}
		out = append(out, s)
	}
	return out
}
