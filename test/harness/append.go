package harness

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// CompareMultisets fails the test when got (row → count) differs from want, naming up to ten differing rows.
func CompareMultisets(t *testing.T, what string, want, got map[string]int) {
	t.Helper()
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			diff = append(diff, fmt.Sprintf("%s: source %d, %s %d", k, want[k], what, got[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: source 0, %s %d", k, what, got[k]))
		}
	}
	if len(diff) > 0 {
		t.Fatalf("%s differs from the source in %d rows (as multisets), e.g.:\n%v", what, len(diff), diff[:min(10, len(diff))])
	}
}

// Missing lists the rows of a (sorted) that b (sorted) lacks, counting duplicates, at most 20.
func Missing(a, b []string) []string {
	var out []string
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j < len(b) && b[j] == x {
			j++
			continue
		}
		if out = append(out, x); len(out) == 20 {
			break
		}
	}
	return out
}

// WalState is what the last commit record of a local WAL says of a postgres or mysql source.
type WalState struct {
	Commit string                     // the record's name, "" when there is none
	Phase  string                     `json:"phase"`
	Recopy map[string]json.RawMessage `json:"recopy"`
	// Progress is the snapshot's progress by table (both sources name it so), snapshot phase only.
	Progress map[string]TableCopy `json:"progress"`
}

// TableCopy is how far a source's snapshot copied one table.
type TableCopy struct {
	Done bool  `json:"done"`
	Rows int64 `json:"rows"`
}

// Copying says the snapshot has copied some of table's rows and not all: a restart finds its copy unfinished.
func (s WalState) Copying(table string) bool {
	p, ok := s.Progress[table]
	return s.Phase == "snapshot" && ok && p.Rows > 0 && !p.Done
}

// Copied says every copy is over: streaming, with no table in mode: append left to copy.
func (s WalState) Copied() bool { return s.Phase == "stream" && len(s.Recopy) == 0 }

// LastCheckpoint reads the last commit record of the local WAL at dir.
func LastCheckpoint(t *testing.T, dir string) WalState {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "commits", "*.json"))
	names = slices.DeleteFunc(names, func(n string) bool { return filepath.Base(n)[0] == '.' }) // unfinished writes
	if err != nil || len(names) == 0 {
		return WalState{}
	}
	slices.Sort(names)
	last := names[len(names)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		return WalState{} // reclaimed meanwhile
	}
	var rec struct {
		Body struct {
			Checkpoint string `json:"checkpoint"`
		} `json:"body"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("commit record %s: %v", last, err)
	}
	cp, err := base64.StdEncoding.DecodeString(rec.Body.Checkpoint)
	if err != nil {
		t.Fatalf("commit record %s: checkpoint: %v", last, err)
	}
	var st WalState
	if err := json.Unmarshal(cp, &st); err != nil {
		t.Fatalf("commit record %s: checkpoint %q: %v", last, cp, err)
	}
	st.Commit = filepath.Base(last)
	return st
}
