package config

import (
	"bytes"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// In a YAML flow mapping (`settings: { dir: ${OUT_DIR} }`, the style the README uses) the
// braces and commas of a ${…} reference are flow indicators, so the file would not even
// parse. Before parsing, those characters inside references are swapped for private-use
// runes, one rune for one character so that yaml's columns stay right; every scalar gets
// its original text back after parsing, before interpolation sees it.
var flowSwap = strings.NewReplacer("{", "\ue000", "}", "\ue001", ",", "\ue002", "[", "\ue003", "]", "\ue004")

var flowRestore = strings.NewReplacer("\ue000", "{", "\ue001", "}", "\ue002", ",", "\ue003", "[", "\ue004", "]")

// refShape is a reference as protectRefs recognises it, from its {: a variable name, then
// optionally :- and a default without quotes, braces, # or a line break. Anything else is
// left alone for the YAML parser and interpolate to judge.
var refShape = regexp.MustCompile(`^\{[A-Za-z_][A-Za-z0-9_]*(:-[^"'{}#\n]*)?\}`)

// protectRefs returns data with the flow indicators inside ${…} and $${…} swapped. A file that already holds the private-use runes is returned as
// it is (nothing could be restored unambiguously).
func protectRefs(data []byte) []byte {
	if !bytes.Contains(data, []byte("${")) || bytes.ContainsAny(data, "\ue000\ue001\ue002\ue003\ue004") {
		return data
	}
	var out bytes.Buffer
	out.Grow(len(data) + 16)
	for len(data) > 0 {
		i := bytes.Index(data, []byte("${"))
		if i < 0 {
			out.Write(data)
			break
		}
		out.Write(data[:i+1]) // through the $
		rest := data[i+1:]
		m := refShape.Find(rest)
		if m == nil {
			data = rest
			continue
		}
		end := len(m) - 1
		out.WriteString(flowSwap.Replace(string(rest[:end+1])))
		data = rest[end+1:]
	}
	return out.Bytes()
}

// restoreRefs puts back what protectRefs swapped, in every scalar under n.
func restoreRefs(n *yaml.Node, seen map[*yaml.Node]bool) {
	if n == nil || seen[n] {
		return
	}
	seen[n] = true
	if n.Kind == yaml.ScalarNode && strings.ContainsAny(n.Value, "\ue000\ue001\ue002\ue003\ue004") {
		n.Value = flowRestore.Replace(n.Value)
	}
	for _, c := range n.Content {
		restoreRefs(c, seen)
	}
	restoreRefs(n.Alias, seen)
}
