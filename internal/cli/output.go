package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// outputFormat is the value of -o/--output: how a listing or a report is printed. One
// flag on every command that prints data (kubectl's convention); --json stays as a
// hidden synonym of -o json for the scripts that use it.
type outputFormat string

const (
	outTable outputFormat = "table"
	outJSON  outputFormat = "json"
	outYAML  outputFormat = "yaml"
)

func (o *outputFormat) String() string { return string(*o) }
func (o *outputFormat) Type() string   { return "table|json|yaml" }

func (o *outputFormat) Set(s string) error {
	switch v := outputFormat(strings.ToLower(s)); v {
	case outTable, outJSON, outYAML:
		*o = v
		return nil
	case "text", "wide":
		*o = outTable
		return nil
	}
	return fmt.Errorf("want table, json or yaml")
}

// output is a command's -o flag.
type output struct {
	format outputFormat
	asJSON bool // --json
}

// addOutput gives c the -o/--output flag (and the hidden --json).
func addOutput(c *cobra.Command) *output {
	o := &output{format: outTable}
	c.Flags().VarP(&o.format, "output", "o", "print as table (default), json or yaml")
	c.Flags().BoolVar(&o.asJSON, "json", false, "same as -o json")
	c.Flags().MarkHidden("json")
	return o
}

// structured reports whether the command prints data (json or yaml) rather than a table.
func (o *output) structured() bool { return o.asJSON || o.format != outTable }

// print writes v as the chosen structured format: JSON indented, or YAML with the same
// field names as the JSON (it goes through JSON, so the two never disagree).
func (o *output) print(w io.Writer, v any) error {
	if o.asJSON || o.format == outJSON {
		return printJSON(w, v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(jsonNumbers(tree)); err != nil {
		return err
	}
	return enc.Close()
}

// printLine writes v as one line of a stream: a JSON object per line, or a YAML document.
func (o *output) printLine(w io.Writer, v any) error {
	if o.asJSON || o.format == outJSON {
		return json.NewEncoder(w).Encode(v)
	}
	fmt.Fprintln(w, "---")
	return o.print(w, v)
}

// jsonNumbers turns json.Number into the number YAML should print (an integer stays one).
func jsonNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = jsonNumbers(e)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// flagError rewrites a flag's parse error in the operator's words: "strconv.ParseInt:
// parsing "x": invalid syntax" says how Go failed, not what the flag wants.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	for _, r := range flagErrorWords {
		msg = r.re.ReplaceAllString(msg, r.with)
	}
	return fmt.Errorf("%s\n\nRun '%s --help' for its flags", msg, c.CommandPath())
}

var flagErrorWords = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`strconv\.Parse(Int|Uint): parsing "[^"]*": invalid syntax`), "not a whole number"},
	{regexp.MustCompile(`strconv\.Parse(Int|Uint): parsing "[^"]*": value out of range`), "too large"},
	{regexp.MustCompile(`strconv\.ParseFloat: parsing "[^"]*": invalid syntax`), "not a number"},
	{regexp.MustCompile(`strconv\.ParseBool: parsing "[^"]*": invalid syntax`), "want true or false"},
	{regexp.MustCompile(`time: (invalid|unknown unit .* in) duration "[^"]*"`), "not a duration (like 30s, 15m, 24h)"},
	{regexp.MustCompile(`time: missing unit in duration "[^"]*"`), "a duration needs a unit (like 30s, 15m, 24h)"},
}
