package scan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Severity of a finding.
type Severity int

// Severities, mildest first. Weak is what a careful operator turns off (it is what
// `iotsafe scan --fail-on weak`, the default, fails on); Insecure is broken.
const (
	Info Severity = iota
	Good
	Weak
	Insecure
)

var severityNames = []string{"info", "good", "weak", "insecure"}

func (s Severity) String() string {
	if int(s) < len(severityNames) {
		return severityNames[s]
	}
	return fmt.Sprint(int(s))
}

// MarshalText writes the severity's name (JSON).
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ParseSeverity reads a severity's name.
func ParseSeverity(name string) (Severity, error) {
	for i, n := range severityNames {
		if n == name {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("unknown severity %q: use %s", name, strings.Join(severityNames, ", "))
}

// Finding is one thing the scan saw.
type Finding struct {
	Check    string   `json:"check"` // versions, suites, groups, certificate, downgrade, ...
	Severity Severity `json:"severity"`
	Detail   string   `json:"detail"`
}

// Report is one target's scan.
type Report struct {
	Target   string    `json:"target"`
	Proto    string    `json:"proto"`
	Findings []Finding `json:"findings"`
	// What a TLS or DTLS endpoint accepts: versions, suites per version (OpenSSL names
	// up to TLS 1.2 and for DTLS, in the server's order; IANA names for TLS 1.3), TLS 1.3
	// groups.
	Versions []string            `json:"versions,omitempty"`
	Suites   map[string][]string `json:"suites,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	// Error is set when the target could not be scanned at all (nothing listening).
	Error string `json:"error,omitempty"`
}

func (r *Report) add(check string, sev Severity, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Check: check, Severity: sev, Detail: fmt.Sprintf(format, args...)})
}

// Worst is the most severe finding's severity (Insecure when the scan failed).
func (r *Report) Worst() Severity {
	if r.Error != "" {
		return Insecure
	}
	w := Info
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

// Print writes reports as tables for people.
func Print(w io.Writer, reports []*Report) error {
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (%s)\n", r.Target, r.Proto)
		if r.Error != "" {
			fmt.Fprintf(w, "  cannot scan: %s\n", r.Error)
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", strings.ToUpper(f.Severity.String()), f.Check, f.Detail)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
