package hubbench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// A path whose requests failed is flagged in summary.json, the terminal table and the
// report: its req/s counts successes only and must not be read as a throughput.
func TestSummaryFlagsFailedRequests(t *testing.T) {
	res := &Results{Skipped: map[string]string{}, RPS: []RPSRow{
		{Path: "plain", Rep: 1, Result: lab.LoadResult{Requests: 5000, Elapsed: time.Second}},
		{Path: "iotsafe", Rep: 1, Result: lab.LoadResult{Requests: 900, Errors: 70, FirstErr: "unexpected EOF", Elapsed: time.Second}},
		{Path: "iotsafe", Rep: 2, Result: lab.LoadResult{Requests: 950, Errors: 30, FirstErr: "connection reset", Elapsed: time.Second}},
	}}
	s := Summarize(res, Options{})
	if s.RPSErrors["iotsafe"] != 100 || s.RPSFirstErr["iotsafe"] != "unexpected EOF" {
		t.Fatalf("errors %v, first %v", s.RPSErrors, s.RPSFirstErr)
	}
	if _, ok := s.RPSErrors["plain"]; ok {
		t.Fatal("a path without failures is flagged")
	}
	var out bytes.Buffer
	Print(&out, s)
	if !strings.Contains(out.String(), "WARNING: iotsafe had 100 failed requests (first: unexpected EOF)") {
		t.Fatalf("terminal output does not warn:\n%s", out.String())
	}
	var html bytes.Buffer
	if err := writeReport(&html, lab.Environment{}, res, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "Warning: iotsafe had 100 failed requests") {
		t.Fatal("report.html does not warn")
	}
}
