package main

import (
	"embed"
	"strings"
)

// The long help of each command is prose, kept in help/<command path>.txt so it reads and diffs as text
// and the Go files hold only flags and wiring.
//
//go:embed help/*.txt
var helpFiles embed.FS

// helpText is a command's long help. A missing file is a build mistake that TestEveryHelpFileUsed and
// TestHelp catch; it panics at start rather than showing an empty help.
func helpText(name string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic("cmd/skippr: no help/" + name + ".txt")
	}
	return strings.TrimSuffix(string(b), "\n")
}
