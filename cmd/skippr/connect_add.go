package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// newConnection is what `skippr connect NAME --plugin …` adds to the config.
type newConnection struct {
	name, plugin, constraint, path string
	settings                       []string // key=value, the value read as a YAML scalar
}

// addConnection adds the connection to the config file (creating the file if needed), keeping the rest of
// the file — comments included — as it was.
func addConnection(path string, nc newConnection, replace bool) error {
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
		root.Content = append(root.Content, scalar("connections"), conns)
	}
	entry := &yaml.Node{Kind: yaml.MappingNode}
	entry.Content = append(entry.Content, scalar("plugin"), scalar(nc.plugin))
	if nc.constraint != "" {
		entry.Content = append(entry.Content, scalar("version"), &yaml.Node{Kind: yaml.ScalarNode, Value: nc.constraint, Style: yaml.DoubleQuotedStyle})
	}
	if nc.path != "" {
		entry.Content = append(entry.Content, scalar("path"), scalar(nc.path))
	}
	if len(nc.settings) > 0 {
		settings := &yaml.Node{Kind: yaml.MappingNode}
		for _, kv := range nc.settings {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return withCode(exitUsage, fmt.Errorf("--set %q: want key=value", kv))
			}
			var val yaml.Node
			if err := yaml.Unmarshal([]byte(v), &val); err != nil || len(val.Content) != 1 {
				val = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: v, Style: yaml.DoubleQuotedStyle}}}
			}
			settings.Content = append(settings.Content, scalar(k), val.Content[0])
		}
		entry.Content = append(entry.Content, scalar("settings"), settings)
	}
	for i := 0; i+1 < len(conns.Content); i += 2 {
		if conns.Content[i].Value == nc.name {
			if !replace {
				return withCode(exitUsage, fmt.Errorf("%s:%d: connection %q exists; pass --replace to overwrite it", path, conns.Content[i].Line, nc.name))
			}
			conns.Content[i+1] = entry
			return writeYAML(path, &doc)
		}
	}
	conns.Content = append(conns.Content, scalar(nc.name), entry)
	return writeYAML(path, &doc)
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

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
