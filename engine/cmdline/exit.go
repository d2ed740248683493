package cmdline

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/run"
)

// Exit codes. Scripts rely on these, so they never change meaning.
const (
	ExitOK       = 0
	ExitFailure  = 1 // the work failed (a plugin error, a WAL error, a destination error)
	ExitUsage    = 2 // bad flags, bad config, unknown names: fix the input and run again
	ExitNotFound = 3 // a plugin, version or registry that does not exist or cannot be reached
	ExitVerify   = 4 // checksum, signature or lock-file verification failed
	ExitLocked   = 5 // the WAL is held by another writer
)

// exitError carries an exit code through urfave/cli to the process's exit.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// WithCode gives err the exit code code; nil stays nil.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// ExitCode maps the engine's codes to the exit codes.
func ExitCode(c run.Code) int {
	switch c {
	case run.Refused:
		return ExitUsage
	case run.NotFound:
		return ExitNotFound
	case run.Unverified:
		return ExitVerify
	case run.Locked:
		return ExitLocked
	}
	return ExitFailure
}

// RegistryExitCode maps the errors of resolving, verifying and installing a plugin to exit codes.
func RegistryExitCode(err error) int { return ExitCode(run.RegistryCode(err)) }

// Exit prints a command's error as "skippr: …" on stderr (through redact, which hides the config's secrets)
// and returns the process's exit code: the one given with WithCode, else urfave/cli's, else the engine's.
func Exit(err error, app string, stderr io.Writer, redact func(string) string) int {
	if err == nil {
		return ExitOK
	}
	// urfave/cli v3 returns a flag's unparsable environment value ("could not parse … from environment
	// variable …", Flag.PostParse) as a bare error, not through OnUsageError as v2 did: a usage error all the same.
	var ee *exitError
	if !errors.As(err, &ee) && strings.HasPrefix(err.Error(), "could not parse ") {
		err = WithCode(ExitUsage, fmt.Errorf("%w (see %s --help)", err, app))
	}
	fmt.Fprintf(stderr, "%s: %s\n", app, redact(err.Error()))
	if errors.As(err, &ee) {
		return ee.code
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		return ce.ExitCode()
	}
	return ExitCode(run.CodeOf(err))
}
