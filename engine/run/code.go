package run

import (
	"errors"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/registry"
)

// Code says what a failed operation needs; the CLI maps each to an exit code.
type Code int

const (
	Failed     Code = iota // the work failed; a retry may fix it
	Refused                // bad config or arguments, or input refused at start: fix the input
	NotFound               // a plugin, version or registry that does not exist or cannot be reached
	Unverified             // checksum, signature, lock-file or identity verification failed
	Locked                 // the WAL is held by another writer
)

// Error is an error with a Code; its message is Err's.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func withCode(c Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: c, Err: err}
}

// CodeOf returns the code of err: the outermost Error's, else the one an engine/connector error implies,
// else Failed.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case err == nil:
		return Failed
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, connector.ErrStart):
		return RegistryCode(err)
	case errors.Is(err, connector.ErrIdentity):
		return Unverified
	case errors.Is(err, connector.ErrSettings), errors.Is(err, connector.ErrKind):
		return Refused
	}
	return Failed
}

// RegistryCode maps the errors of resolving, verifying and starting a plugin binary.
func RegistryCode(err error) Code {
	switch {
	case errors.Is(err, registry.ErrChecksum), errors.Is(err, registry.ErrSignature), errors.Is(err, registry.ErrLockMismatch):
		return Unverified
	case errors.Is(err, registry.ErrIncompatible), errors.Is(err, client.ErrProtocol):
		// A plugin that speaks no protocol of this engine needs another version: a retry cannot help.
		return Refused
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrUnreachable), errors.Is(err, registry.ErrNotInstalled):
		return NotFound
	case errors.Is(err, registry.ErrInvalid):
		return Refused
	}
	return Failed
}
