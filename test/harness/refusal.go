package harness

import (
	"os"
)

// NoWAL asserts that a refused pipeline wrote nothing: its WAL was never created.
func (e *Env) NoWAL(path string) {
	e.T.Helper()
	if entries, err := os.ReadDir(path); err == nil && len(entries) > 0 {
		e.T.Fatalf("a refused pipeline wrote its WAL: %d entries in %s", len(entries), path)
	}
}
