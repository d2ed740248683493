package proc

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Stopper is a server a test binary can stop.
type Stopper interface{ Stop() error }

// Shared is a test binary's one server of a kind: started by the first test that needs it, stopped by Main.
// A harness package keeps one as a package variable, since TestMain and the tests share nothing else.
type Shared[S Stopper] struct {
	Pkg     string                           // the harness's name, for messages: "pgtest"
	Timeout time.Duration                    // how long a start may take
	StartFn func(context.Context) (S, error) // starts a server with the default options
	mu      sync.Mutex
	main    bool
	srv     S
	started bool
	err     error
}

// Main runs the tests, stops the shared server, runs cleanups and exits.
func (sh *Shared[S]) Main(m *testing.M, cleanups ...func()) {
	sh.mu.Lock()
	sh.main = true
	sh.mu.Unlock()
	code := m.Run()
	sh.mu.Lock()
	if sh.started && sh.err == nil {
		if err := sh.srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stop shared server: %v\n", sh.Pkg, err)
		}
		var zero S
		sh.srv, sh.started = zero, false
	}
	sh.mu.Unlock()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// Get returns the shared server, starting it on first use; the test fails when it cannot start or Main is
// not in use.
func (sh *Shared[S]) Get(t testing.TB) S {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.main {
		t.Fatalf("%[1]s: the package's TestMain must call %[1]s.Main(m), so the shared server is stopped after the tests", sh.Pkg)
	}
	if !sh.started {
		ctx, cancel := context.WithTimeout(context.Background(), sh.Timeout)
		defer cancel()
		sh.srv, sh.err = sh.StartFn(ctx)
		sh.started = true
	}
	if sh.err != nil {
		t.Fatalf("%s: %v", sh.Pkg, sh.err)
	}
	return sh.srv
}

// Own starts a server of the test's own with start, stopped when the test ends.
func (sh *Shared[S]) Own(t testing.TB, start func(context.Context) (S, error)) S {
	t.Helper()
	sh.mu.Lock()
	ok := sh.main
	sh.mu.Unlock()
	if !ok {
		t.Fatalf("%[1]s: the package's TestMain must call %[1]s.Main(m), so the shared server is stopped after the tests", sh.Pkg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sh.Timeout)
	defer cancel()
	s, err := start(ctx)
	if err != nil {
		t.Fatalf("%s: %v", sh.Pkg, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("%s: %v", sh.Pkg, err)
		}
	})
	return s
}
