package lab

import (
	"fmt"
	"hash/fnv"
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

var chartColors = []string{"#2a7", "#c53", "#57b", "#a5a", "#b92", "#488", "#e7298a", "#666", "#8c564b", "#17becf"}

// colorsFor gives each name of a figure its colour, chosen by the name (chartColor), so
// that "openssh" is drawn in the same colour in every figure of every report, whichever
// other series a figure has and in whatever order. Two names of one figure that want
// the same colour are settled in name order, not in the figure's.
func colorsFor(names []string) map[string]string {
	taken, out := map[string]bool{}, map[string]string{}
	for _, n := range slices.Sorted(slices.Values(names)) {
		if _, ok := out[n]; !ok {
			out[n] = chartColor(n, taken)
		}
	}
	return out
}

// chartColor is name's colour: its hash's, or the next one not taken in the figure.
func chartColor(name string, taken map[string]bool) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	i := int(h.Sum32() % uint32(len(chartColors)))
	for range chartColors {
		c := chartColors[i]
		if !taken[c] {
			taken[c] = true
			return c
		}
		i = (i + 1) % len(chartColors)
	}
	return chartColors[i] // more series than colours: share
}

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
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	colors := colorsFor(names)
	for i, s := range ss {
		c := colors[s.Name]
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

// Box is one box of a BoxPlot: the 5th, 25th, 50th, 75th and 95th percentiles.
type Box struct {
	Label string
	P     [5]float64
}

// BoxPlot draws boxes side by side as an inline SVG (whiskers at the 5th and 95th
// percentiles, as paper 002's delay figures), y linear from 0, labels under the boxes.
func BoxPlot(title, yLabel string, boxes []Box) template.HTML {
	if len(boxes) == 0 {
		return ""
	}
	const h, left, top, bottom, slot = 300, 60, 30, 120, 34
	w := left + slot*len(boxes) + 20
	ymax := 0.0
	for _, bx := range boxes {
		ymax = max(ymax, bx.P[4])
	}
	if ymax <= 0 {
		ymax = 1
	}
	py := func(y float64) float64 { return top + (1-y/ymax)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" role="img" aria-label="%s">`, max(w, 320), h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">%s</text>`, left, html.EscapeString(title))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, top, left, h-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, h-bottom, w-10, h-bottom)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" dy="4">%s</text>`, left-6, py(y), compact(y))
	}
	fmt.Fprintf(&b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`, (top+h-bottom)/2, (top+h-bottom)/2, html.EscapeString(yLabel))
	var labels []string
	for _, bx := range boxes {
		labels = append(labels, bx.Label)
	}
	colors := colorsFor(labels)
	for i, bx := range boxes {
		x := float64(left + slot*i + slot/2)
		c := colors[bx.Label]
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="%s"/>`, x, py(bx.P[0]), x, py(bx.P[4]), c)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%d" height="%.1f" fill="%s" fill-opacity="0.35" stroke="%s"/>`,
			x-slot/3, py(bx.P[3]), 2*slot/3, max(py(bx.P[1])-py(bx.P[3]), 1), c, c)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#222" stroke-width="2"/>`, x-slot/3, py(bx.P[2]), x+slot/3, py(bx.P[2]))
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" transform="rotate(60 %.0f %d)" font-size="10">%s</text>`, x, h-bottom+12, x, h-bottom+12, html.EscapeString(bx.Label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and escaped labels only
}
