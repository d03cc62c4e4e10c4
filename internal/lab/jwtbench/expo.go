package jwtbench

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text exposition format: a series name, its
// labels and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// maxExpoLine bounds a line of the hub's /metrics (its longest are histogram buckets).
const maxExpoLine = 64 << 10

// parseExposition reads the text format the hub's /metrics writes: comments and blank
// lines are skipped, every other line is NAME[{LABELS}] VALUE [TIMESTAMP]. The lab needs
// its counters, sums and counts, not a client library for them.
func parseExposition(r io.Reader) ([]sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxExpoLine)
	var out []sample
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value: %.40q", line)
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		rest, err := parseLabels(line[1:], s.labels)
		if err != nil {
			return s, err
		}
		line = rest
	}
	fields := strings.Fields(line)
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("want a value (and a timestamp) after %s", s.name)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value of %s: %w", s.name, err)
	}
	s.value = v
	return s, nil
}

// parseLabels reads name="value" pairs up to the closing brace into into; values may
// hold escaped quotes, backslashes and newlines, and braces.
func parseLabels(in string, into map[string]string) (rest string, err error) {
	for {
		in = strings.TrimLeft(in, " ,")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.IndexByte(in, '=')
		if eq <= 0 || len(in) < eq+2 || in[eq+1] != '"' {
			return "", fmt.Errorf("malformed labels")
		}
		name := strings.TrimSpace(in[:eq])
		in = in[eq+2:]
		var b strings.Builder
		closed := false
		for j := 0; j < len(in); j++ {
			c := in[j]
			if c == '\\' && j+1 < len(in) {
				j++
				switch in[j] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(in[j])
				}
				continue
			}
			if c == '"' {
				in, closed = in[j+1:], true
				break
			}
			b.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("unterminated label %s", name)
		}
		into[name] = b.String()
	}
}
