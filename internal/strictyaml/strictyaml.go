package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// Decode fills v from data. Empty input leaves v unchanged. Errors read
// "ssh.keepalive_interval (line 3): cannot unmarshal ...".
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	for i, m := range msgs {
		msgs[i] = describe(&root, m)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// describe prefixes a "line N: ..." message with the path of the key on line N.
func describe(root *yaml.Node, msg string) string {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	if path := pathAt(root, line, ""); path != "" {
		return fmt.Sprintf("%s (line %d): %s", path, line, m[2])
	}
	return msg
}

// pathAt finds the deepest mapping key on line (or whose value starts there).
func pathAt(n *yaml.Node, line int, prefix string) string {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			p := prefix
			if n.Kind == yaml.SequenceNode {
				p = fmt.Sprintf("%s[%d]", prefix, i)
			}
			if found := pathAt(c, line, p); found != "" {
				return found
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if prefix != "" {
				p = prefix + "." + k.Value
			}
			if found := pathAt(v, line, p); found != "" {
				return found
			}
			if k.Line == line || v.Line == line {
				return p
			}
		}
	}
	return ""
}
