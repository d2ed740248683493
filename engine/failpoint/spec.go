package failpoint

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Action is what an armed point does when it fires.
type Action int

const (
	Exit Action = iota + 1
	Error
	Sleep
	Wait
)

// Term is one armed point: fire Action at hit Nth (1-based).
type Term struct {
	Nth    int
	Action Action
	Sleep  time.Duration // for Sleep
	File   string        // for Wait
}

func (t Term) String() string {
	switch t.Action {
	case Exit:
		return "exit"
	case Error:
		return "error"
	case Sleep:
		return fmt.Sprintf("sleep(%d)", t.Sleep.Milliseconds())
	case Wait:
		return fmt.Sprintf("wait(%s)", t.File)
	}
	return "?"
}

// Parse reads a SKIPPR_FAILPOINTS value (package doc, Arming) into the armed points by name. Only names in
// known are accepted. It is here rather than in the failpoints build so the grammar is tested by every
// `go test`; a build without the tag never calls it, so the linker drops it.
func Parse(spec string, known []string) (map[string]Term, error) {
	out := map[string]Term{}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, term, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("%s: %q: want <point>=<action>", EnvVar, item)
		}
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("%s: unknown point %q (points: %s)", EnvVar, name, strings.Join(known, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: point %q armed twice", EnvVar, name)
		}
		t, err := parseTerm(strings.TrimSpace(term))
		if err != nil {
			return nil, fmt.Errorf("%s: point %s: %w", EnvVar, name, err)
		}
		out[name] = t
	}
	return out, nil
}

func parseTerm(s string) (Term, error) {
	t := Term{Nth: 1}
	if n, rest, ok := strings.Cut(s, "*"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return t, fmt.Errorf("%q: the hit count before * must be a whole number from 1", s)
		}
		t.Nth, s = v, rest
	}
	switch {
	case s == "exit":
		t.Action = Exit
	case s == "error":
		t.Action = Error
	case strings.HasPrefix(s, "wait(") && strings.HasSuffix(s, ")"):
		f := s[len("wait(") : len(s)-1]
		if f == "" || strings.Contains(f, ")") {
			return t, fmt.Errorf("%q: wait takes a file's path, wait(<file>)", s)
		}
		t.Action, t.File = Wait, f
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		ms, err := strconv.Atoi(s[len("sleep(") : len(s)-1])
		if err != nil || ms < 0 {
			return t, fmt.Errorf("%q: sleep takes milliseconds, sleep(<ms>)", s)
		}
		t.Action, t.Sleep = Sleep, time.Duration(ms)*time.Millisecond
	default:
		return t, fmt.Errorf("unknown action %q (exit, error, sleep(<ms>))", s)
	}
	return t, nil
}
