package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrConnectionExists: AddConnection found a connection of that name and was not asked to replace it.
var ErrConnectionExists = errors.New("connection exists")

// NewConnection is a connection to add to a config file (`skippr connect NAME --plugin …`).
type NewConnection struct {
	Name, Plugin, Constraint, Path string
	// Settings are key and value pairs in order; each value is read as a YAML scalar, and kept as a quoted
	// string when it does not parse as one.
	Settings [][2]string
}

// ParseSettings reads `skippr connect --set` values, each key=value (the value may hold '=' itself), into
// NewConnection.Settings, in order.
func ParseSettings(kvs []string) ([][2]string, error) {
	var out [][2]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: want key=value", kv)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// AddConnection adds nc under connections: in the config file at path, creating the file if needed and
// keeping the rest of it, comments included, as it was. A connection of the same name is replaced only with
// replace, else the error matches ErrConnectionExists. The file is replaced by rename, never half-written.
func AddConnection(path string, nc NewConnection, replace bool) error {
	var doc yaml.Node
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	case err != nil:
		return err
	default:
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if doc.Kind == 0 { // an empty file
			doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
		}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: the document is not a mapping", path, root.Line)
	}
	conns := mappingValue(root, "connections")
	if conns == nil {
		conns = &yaml.Node{Kind: yaml.MappingNode}
		root.Content = append(root.Content, plainScalar("connections"), conns)
	}
	entry := nc.node()
	for i := 0; i+1 < len(conns.Content); i += 2 {
		if conns.Content[i].Value == nc.Name {
			if !replace {
				return &editError{fmt.Sprintf("%s:%d: connection %q exists; pass --replace to overwrite it", path, conns.Content[i].Line, nc.Name), ErrConnectionExists}
			}
			conns.Content[i+1] = entry
			return writeYAML(path, &doc)
		}
	}
	conns.Content = append(conns.Content, plainScalar(nc.Name), entry)
	return writeYAML(path, &doc)
}

// node is the connection's mapping: plugin, version, path and settings, in that order.
func (nc NewConnection) node() *yaml.Node {
	entry := &yaml.Node{Kind: yaml.MappingNode}
	entry.Content = append(entry.Content, plainScalar("plugin"), plainScalar(nc.Plugin))
	if nc.Constraint != "" {
		entry.Content = append(entry.Content, plainScalar("version"), &yaml.Node{Kind: yaml.ScalarNode, Value: nc.Constraint, Style: yaml.DoubleQuotedStyle})
	}
	if nc.Path != "" {
		entry.Content = append(entry.Content, plainScalar("path"), plainScalar(nc.Path))
	}
	if len(nc.Settings) > 0 {
		settings := &yaml.Node{Kind: yaml.MappingNode}
		for _, kv := range nc.Settings {
			var val yaml.Node
			if err := yaml.Unmarshal([]byte(kv[1]), &val); err != nil || len(val.Content) != 1 {
				val = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: kv[1], Style: yaml.DoubleQuotedStyle}}}
			}
			settings.Content = append(settings.Content, plainScalar(kv[0]), val.Content[0])
		}
		entry.Content = append(entry.Content, plainScalar("settings"), settings)
	}
	return entry
}

// editError is a message that matches its kind with errors.Is.
type editError struct {
	msg  string
	kind error
}

func (e *editError) Error() string        { return e.msg }
func (e *editError) Is(target error) bool { return target == e.kind }

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func plainScalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

// writeYAML writes doc to path through a temporary file and a rename.
func writeYAML(path string, doc *yaml.Node) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
