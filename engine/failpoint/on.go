//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
)

// Enabled reports whether this binary was built with the failpoints tag.
const Enabled = true

// ErrInjected is what a point armed with `error` returns, wrapped with the point's name.
var ErrInjected = errors.New("failpoint: injected error")

// armedSet is the points armed in this process, by name.
type armedSet map[string]*armed

type armed struct {
	term Term
	hits atomic.Int64
}

// points is read from the environment before main runs and never changes after: Hit only reads the map.
var points = fromEnv()

func fromEnv() armedSet {
	s, err := newArmedSet(os.Getenv(EnvVar))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return s
}

func newArmedSet(spec string) (armedSet, error) {
	terms, err := Parse(spec, Known())
	if err != nil {
		return nil, err
	}
	s := armedSet{}
	for name, t := range terms {
		s[name] = &armed{term: t}
	}
	return s, nil
}

// Hit marks the point name: when it is armed and this is the hit it fires at, it writes its line to stderr and
// acts (package doc). It returns an error only for the action error.
func Hit(name string) error { return points.hit(name, os.Stderr, kill) }

func (s armedSet) hit(name string, w io.Writer, kill func()) error {
	a := s[name]
	if a == nil {
		return nil
	}
	n := a.hits.Add(1)
	if n != int64(a.term.Nth) {
		return nil
	}
	fmt.Fprintf(w, "failpoint %s fired (hit %d): %s\n", name, n, a.term)
	switch a.term.Action {
	case Exit:
		kill()
	case Error:
		return fmt.Errorf("failpoint %s: %w", name, ErrInjected)
	case Sleep:
		time.Sleep(a.term.Sleep)
	case Wait:
		for {
			if _, err := os.Stat(a.term.File); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// kill SIGKILLs the process (TerminateProcess on Windows) and waits for the signal: no deferred call runs and
// the caller never goes on.
func kill() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Kill()
	}
	for {
		time.Sleep(time.Hour)
	}
}
